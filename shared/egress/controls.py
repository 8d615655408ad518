"""A dependent's calls judged on their parents' controls (DESIGN §16): the pure rules the
egress applies to every call of theirs (consent for each processor, quiet hours) and a
send's admission applies too (``shared/families/controls.py``, which also counts the
daily turns). Their role and controls are read afresh at each call
(``Roles.standing``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, time
from typing import Literal

from shared.errors import ParentControls
from shared.schemas.documents import Consent, Controls, QuietHours
from shared.schemas.documents.family import zone

Processor = Literal["chat", "speech", "transcription", "moderation"]

CONSENT = (
    "A parent in your family has not allowed this part of Spark AI Agent for you. "
    "Ask them if you would like to use it."
)
QUIET = (
    "It is quiet hours, which a parent in your family has set: Spark AI Agent will be "
    "back afterwards."
)
DAILY = (
    "You have used all of today's turns, which a parent in your family has set. Come back tomorrow."
)


def _clock_time(hhmm: str) -> time:
    hours, minutes = hhmm.split(":")
    return time(int(hours), int(minutes))


def quiet_now(quiet: QuietHours | None, now: datetime) -> bool:
    """Whether ``now`` falls in ``quiet`` (from ``start``, up to ``end``, in its time
    zone); a window whose end is before its start crosses midnight, and one whose start
    is its end is empty."""
    if quiet is None:
        return False
    local = now.astimezone(zone(quiet.time_zone)).time().replace(second=0, microsecond=0)
    start, end = _clock_time(quiet.start), _clock_time(quiet.end)
    if start <= end:
        return start <= local < end
    return local >= start or local < end


def day_of(controls: Controls, now: datetime) -> str:
    """Today's date (``YYYY-MM-DD``) where the dependent is: the quiet hours' time zone,
    else UTC."""
    if controls.quiet_hours is not None:
        now = now.astimezone(zone(controls.quiet_hours.time_zone))
    return now.date().isoformat()


def refusal(
    controls: Controls | None, processors: Iterable[Processor], now: datetime
) -> ParentControls | None:
    """Why ``controls`` forbid a call to ``processors`` now (``None``: they allow it, or
    there are none: an adult, a stranger)."""
    if controls is None:
        return None
    consent: Consent = controls.consent
    for processor in processors:
        if not getattr(consent, processor):
            return ParentControls(CONSENT, "consent", detail=f"no consent for {processor}")
    if quiet_now(controls.quiet_hours, now):
        return ParentControls(QUIET, "quiet_hours")
    return None


def chat_processors(*, moderated: bool) -> tuple[Processor, ...]:
    """What a dependent's chat turn needs consent for: the chat model and, where their
    turns are judged, the moderator (an unjudged turn is not answered)."""
    return ("chat", "moderation") if moderated else ("chat",)
