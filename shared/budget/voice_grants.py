"""Pure changes to a user's ledger for live-audio sessions: granted (counted), recorded,
redeemed by the first voice message, or withdrawn."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.budget.allowance import until_midnight, usage_today
from shared.errors import (
    RateLimited,
    VoiceSessionEnded,
    VoiceSessionNotFound,
    VoiceSessionUsed,
)
from shared.schemas.server import (
    TaskLedger,
    VoiceGrant,
)

# -- live-audio sessions -----------------------------------------------------------------
#
# grant_voice (counted, nothing minted yet) ─▶ record_voice (the secret's hash) ─▶
# redeem_voice (the first voice message binds it to its conversation) ─▶ ends_at.
# withdraw_voice undoes a grant whose secret the provider did not give.

VOICE_KEPT = timedelta(days=1)
"""How long a session's grant (the secret's hash, whose it was) is kept after it ends."""


@dataclass(frozen=True, slots=True)
class VoiceLimits:
    sessions_per_day: int = 20
    session: timedelta = timedelta(minutes=30)


def grant_voice(
    ledger: TaskLedger,
    session_id: str,
    provider: str,
    model: str,
    now: datetime,
    limits: VoiceLimits,
) -> TaskLedger:
    """Count one more live-audio session today and record its grant (no secret yet).

    Raises:
        RateLimited: today's sessions are used up; nothing is written.
    """
    today = usage_today(ledger, now)
    if today.voice_sessions >= limits.sessions_per_day:
        raise RateLimited(
            f"You have started today's allowance of {limits.sessions_per_day} voice "
            "conversations; it renews at midnight (UTC). You can still type, or use "
            "push-to-talk.",
            until_midnight(now),
            limit="voice_sessions",
        )
    kept = {k: g for k, g in ledger.voice.items() if g.ends_at + VOICE_KEPT > now}
    kept[session_id] = VoiceGrant(
        provider=provider, model=model, granted_at=now, ends_at=now + limits.session
    )
    counted = today.model_copy(update={"voice_sessions": today.voice_sessions + 1})
    return ledger.model_copy(update={"usage": counted, "voice": kept})


def record_voice(
    ledger: TaskLedger, session_id: str, secret_hash: str, expires_at: datetime
) -> TaskLedger:
    """Keep the hash of the secret the provider minted for the session."""
    grant = ledger.voice.get(session_id)
    if grant is None or grant.secret_hash == secret_hash:
        return ledger
    updated = grant.model_copy(update={"secret_hash": secret_hash, "expires_at": expires_at})
    return ledger.model_copy(update={"voice": {**ledger.voice, session_id: updated}})


def withdraw_voice(ledger: TaskLedger, session_id: str, now: datetime) -> TaskLedger:
    """Forget a grant whose secret was never minted, and give its count back."""
    grant = ledger.voice.get(session_id)
    if grant is None or grant.secret_hash is not None:
        return ledger
    voice = {k: g for k, g in ledger.voice.items() if k != session_id}
    today = usage_today(ledger, now)
    if grant.granted_at.date().isoformat() == today.day and today.voice_sessions:
        today = today.model_copy(update={"voice_sessions": today.voice_sessions - 1})
    return ledger.model_copy(update={"voice": voice, "usage": today})


def redeem_voice(
    ledger: TaskLedger, session_id: str, conversation_id: str, now: datetime
) -> TaskLedger:
    """Let a voice message into ``conversation_id`` name the session: the first one
    binds the session to its conversation, later ones must come in the same one.

    Raises:
        VoiceSessionNotFound: no session with this id was minted for the user.
        VoiceSessionEnded: it is over.
        VoiceSessionUsed: it was redeemed in another conversation.
    """
    grant = ledger.voice.get(session_id)
    if grant is None or grant.secret_hash is None:
        raise VoiceSessionNotFound("No voice session with this voiceSessionId is yours.")
    if grant.ends_at <= now:
        raise VoiceSessionEnded(
            "This voice session has ended; start a new one to carry on talking."
        )
    if grant.conversation_id is not None:
        if grant.conversation_id != conversation_id:
            raise VoiceSessionUsed(
                "This voice session belongs to another conversation; start a new one "
                "for this conversation."
            )
        return ledger
    bound = grant.model_copy(update={"conversation_id": conversation_id, "redeemed_at": now})
    return ledger.model_copy(update={"voice": {**ledger.voice, session_id: bound}})
