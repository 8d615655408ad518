"""How many verbatim messages to family members a user may send (issue 34): at most
``messages_per_minute`` in any minute and ``bytes_per_hour`` (each message as stored:
its text and its files' references) in any hour. One member sent 1,500 messages of
32 KiB in 23 s, all delivered: every recipient's copy rolled over into 1,480 segments.

The count is the user's ``SentMessages`` (``/{uid}/server/family/sent``, server-only),
read and written in the transaction that delivers the message (``Delivery``), so it
holds across processes and a refused message delivers nothing. ``admit`` is pure: it
counts one message, or refuses it with the time until both allowances would really
admit it (``Retry-After``), as ``membership.within_hour`` does for invites and joins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.errors import RateLimited
from shared.schemas.server import MinuteBytes, SentMessages

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class SendLimits:
    """The allowances; ``Settings`` gives the values."""

    messages_per_minute: int = 20
    bytes_per_hour: int = 1024 * 1024


def sent_path(user_id: str) -> tuple[str, ...]:
    """Where the user's count lives: server-only, beside their membership."""
    return (user_id, "server", "family", "sent")


def _seconds(wait: timedelta) -> int:
    return max(1, math.ceil(wait.total_seconds()))


def _in(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minutes"


def _size(count: int) -> str:
    return f"{count / 1024:,.0f} KiB" if count < 1024 * 1024 else f"{count / 2**20:,.1f} MiB"


def admit(sent: SentMessages, size: int, now: datetime, limits: SendLimits) -> SentMessages:
    """``sent`` with one more message of ``size`` bytes counted at ``now``: the last
    minute's times (the newest ``messages_per_minute`` kept) and the last hour's bytes
    by minute (at most 60 minutes kept). A message bigger than the whole hour's bytes
    goes when nothing else was sent that hour.

    Raises:
        RateLimited: either allowance is used up; ``retry_after`` is when both admit this
            message (the oldest message leaving the minute, enough of the hour's bytes
            leaving the hour), and the message names the one that refused.
    """
    recent = sorted(t for t in sent.recent if now - t < MINUTE)
    minutes = sorted((m for m in sent.minutes if now - m.start < HOUR), key=lambda m: m.start)
    waits: list[tuple[int, str]] = []
    per_minute = limits.messages_per_minute
    if len(recent) >= per_minute:
        wait = _seconds(recent[len(recent) - per_minute] + MINUTE - now)
        waits.append(
            (
                wait,
                f"You have sent {per_minute} messages to your family in the last minute, "
                "the most allowed.",
            )
        )
    used = sum(m.size for m in minutes)
    if used and used + size > limits.bytes_per_hour:
        left = used
        for minute in minutes:  # the oldest leave the hour first
            left -= minute.size
            if not left or left + size <= limits.bytes_per_hour:
                wait = _seconds(minute.start + HOUR - now)
                break
        waits.append(
            (
                wait,
                f"Your messages to your family in the last hour came to {_size(used)}, and "
                f"this one ({_size(size)}) would pass the {_size(limits.bytes_per_hour)} "
                "allowed in an hour.",
            )
        )
    if waits:
        longest = max(w for w, _ in waits)
        said = " ".join(text for _, text in waits)
        raise RateLimited(f"{said} Try again in {_in(longest)}.", longest, limit="family_messages")
    start = now.replace(second=0, microsecond=0)
    if minutes and minutes[-1].start == start:
        last = minutes[-1]
        minutes[-1] = last.model_copy(update={"size": last.size + size})
    else:
        minutes.append(MinuteBytes(start=start, size=size))
    return SentMessages(recent=[*recent, now][-per_minute:], minutes=minutes[-60:])
