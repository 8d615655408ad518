"""The agent: runs, the model loop, streamed events and their persistence.

This module is its one public face: ``Agent``, the verbs the ``api`` and ``tasks``
functions call, and the values those verbs take and give. Everything else lives in
rooms, each named for what it does, and is the agent's own: ``sending`` (a message
admitted and its run opened), ``run`` (the run's life: the loop, its writes, its slot,
its watchdog), ``stream`` (the events, framed and replayed), ``waiting`` (people's and
tasks' results, and the one path on after them), ``prompt`` (what the model is sent)
and ``conversations`` (renamed, rated, deleted, titled, swept). Only the wiring
(``shared/wiring.py``) builds the rooms' parts; ``tests/unit/test_architecture.py``
holds everyone else to this face.
"""

from shared.agent.conversations.manage import NO_MESSAGE
from shared.agent.facade import Agent
from shared.agent.prompt.files import AttachmentBudget
from shared.agent.run.deps import RunLimits
from shared.agent.run.runs import QueueLimits
from shared.agent.service import Next
from shared.agent.stream.uistream import HEADERS
from shared.agent.waiting.people import Resumed
from shared.agent.waiting.results import follow_up_id, wants_follow_up
from shared.agent.waiting.task_calls import Recorded
from shared.agent.waiting.whose import waiting_on_person

__all__ = [
    "HEADERS",
    "NO_MESSAGE",
    "Agent",
    "AttachmentBudget",
    "Next",
    "QueueLimits",
    "Recorded",
    "Resumed",
    "RunLimits",
    "follow_up_id",
    "waiting_on_person",
    "wants_follow_up",
]
