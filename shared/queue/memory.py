"""An in-memory ``TaskQueue`` for unit tests: tasks wait in a list until the test
delivers them (as often as it likes, to play the redelivering emulator)."""

from __future__ import annotations

from shared.errors import QueueUnavailable
from shared.queue.base import QueuedTask


class InMemoryTaskQueue:
    def __init__(self) -> None:
        self.tasks: list[QueuedTask] = []
        self.names: set[str] = set()
        self.failing = False

    async def enqueue(self, task: QueuedTask) -> None:
        if self.failing:
            raise QueueUnavailable("The task queue is unavailable (test).")
        if task.name in self.names:
            return
        self.names.add(task.name)
        self.tasks.append(task)

    def take(self) -> list[QueuedTask]:
        """Everything enqueued since the last call, oldest first."""
        tasks, self.tasks = self.tasks, []
        return tasks
