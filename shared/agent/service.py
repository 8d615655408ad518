"""``RunService``: the runs of this process, behind the ``Agent`` facade (``facade.py``)
that the HTTP edge and the tasks function talk to. It puts together the parts, each with
one concern:

* ``opening.py``: a user's message, refused early, admitted and opened (``Opening``),
  with the head start of its model request (``sending/head_start.py``);
* ``claims.py``: a queued run admitted and claimed for the delivery that produces it;
* ``continuation.py``: the one path on after a result;
* ``supervision.py``: stopping runs and the watchdog's look at them, on ``watch.py``
  (watchdogs, hand-ons, closing dead runs);
* ``slot.py``: a run's place among its user's run slots, taken and freed in one place.

Every run is a record in the conversation document (``runs.py``); a ``Run`` produces
its reply (``loop.py``).
"""

from __future__ import annotations

from datetime import timedelta

from shared.agent.run.background import Background
from shared.agent.run.deps import RunDeps
from shared.agent.run.loop import Run
from shared.agent.run.supervision import Stopped, Supervision
from shared.agent.run.watch import Watch
from shared.agent.sending.claims import Claims
from shared.agent.sending.draft import WhenBusy
from shared.agent.sending.head_start import HeadStarts
from shared.agent.sending.opening import Hearing, Opening, Sent
from shared.agent.waiting.continuation import Continuation, Next
from shared.attachments.service import Attachments
from shared.attachments.voice import VoiceClips
from shared.ids import IdGenerator
from shared.queue.port import TaskPort
from shared.store.base import LessonStore

__all__ = ["Hearing", "Next", "RunService", "Sent", "Stopped", "WhenBusy"]


class RunService:
    """Opens, claims, continues, stops and watches over runs; one per process."""

    def __init__(
        self,
        deps: RunDeps,
        ids: IdGenerator,
        scheduler: TaskPort,
        lessons: LessonStore,
        attachments: Attachments,
        background: Background,
        voice: VoiceClips | None = None,
    ) -> None:
        self._deps = deps
        self._voice = voice or VoiceClips(deps.files, deps.model, 0)
        self._watch = Watch(deps, scheduler)
        self._claims = Claims(deps, self._watch)
        starts = HeadStarts(deps)
        # The facade and the chat route send through it directly: a send's parameters
        # are written where they are taken and where they are used, not forwarded here.
        self.opening = Opening(
            deps, ids, self._watch, starts, background, lessons, attachments, self._voice
        )
        self._supervision = Supervision(deps, self._watch, self._claims, scheduler)
        self.continuation = Continuation(deps, self._watch, self._claims, scheduler)

    @property
    def model(self) -> str:
        """The label of the model that answers (what each reply records as its model)."""
        return self._deps.label

    def lease(self) -> timedelta:
        """How long a run's (or a queued run's) lease lasts from when it is written."""
        return self._watch.lease()

    async def claim(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """A queued run, admitted and claimed for this delivery (``Claims.claim``)."""
        return await self._claims.claim(user_id, conversation_id, run_id)

    async def stop(self, user_id: str, conversation_id: str) -> Stopped:
        """Stop the conversation's active run wherever it runs (``Supervision.stop``)."""
        return await self._supervision.stop(user_id, conversation_id)

    async def supervise(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """The watchdog's look at ``run_id`` (``Supervision.supervise``)."""
        return await self._supervision.supervise(user_id, conversation_id, run_id)
