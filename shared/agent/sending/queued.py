"""Pure changes to a queued run (a ``202`` send's, a queued message's, a follow-up's):
claimed once, held while it waits for a slot, refused, or renewed when nobody took it
(used inside ``mutate``, as ``runs.py``'s changes are; ``claims.py`` and ``watch.py``
make them).
"""

from __future__ import annotations

from datetime import datetime

from shared.agent.run.runs import placeholder, with_run
from shared.errors import AlreadyAnswered
from shared.schemas.documents import ActiveRun, Conversation


def renew_queued(conversation: Conversation, now: datetime, lease_until: datetime) -> Conversation:
    """Give a queued run nobody took a fresh lease, so it can be handed on again (its
    reply task and watchdog were lost); any other conversation is unchanged."""
    run = conversation.active_run
    if run is None or run.status != "queued" or run.lease_expires_at > now:
        return conversation
    return with_run(conversation, run, {"lease_expires_at": lease_until})


def claim_queued_run(
    conversation: Conversation, run_id: str, lease_until: datetime, model: str | None = None
) -> Conversation:
    """Mark a queued run (a ``202`` send or a queued message) as produced, once.

    Raises:
        AlreadyAnswered: the run is not queued any more (another delivery took it,
            or it was closed).
    """
    run = conversation.active_run
    if run is None or run.run_id != run_id or run.status != "queued":
        raise AlreadyAnswered("This reply has been taken care of already.")
    message = (run.message or placeholder(run)).model_copy(update={"model": model})
    update = {
        "status": "streaming",
        "lease_expires_at": lease_until,
        "message": message,
        "waiting_for": None,
    }
    return with_run(conversation, run, update)


def _queued(conversation: Conversation, run_id: str) -> ActiveRun | None:
    run = conversation.active_run
    return run if run is not None and run.run_id == run_id and run.status == "queued" else None


def hold_queued(
    conversation: Conversation, run_id: str, why: str, lease_until: datetime
) -> Conversation:
    """Keep a queued run that was refused a slot queued, saying why, with a lease its
    watchdog tries it again after (any other conversation is unchanged)."""
    run = _queued(conversation, run_id)
    if run is None:
        return conversation
    return with_run(conversation, run, {"waiting_for": why, "lease_expires_at": lease_until})
