"""Live audio (DESIGN §9): a short-lived provider secret, minted per session, so the
browser talks to the provider itself and never sees an API key.

``LiveSessions.start``::

    grant (ledger: counted, precondition) ─▶ mint (provider) ─▶ record the secret's hash
          │ 429: today's sessions used up            │ failed: the grant is withdrawn
          ▼ nothing minted                           ▼ (its count given back)

Two processes cannot both grant the user's last session: the grant is one
compare-and-set write of the user's ledger, made before the provider is asked. The
secret is returned once and never stored; its SHA-256 is kept with the grant, so a
leaked secret can be traced to whose session it was.

The browser then sends each finished utterance's transcript as a message with
``input: "voice"`` and the session's id (``voiceSessionId``): the first such message
redeems the session for its conversation (``shared/budget/voice_grants.redeem_voice``, in the
same write as the run's admission), and the session carries messages into that
conversation only, until it ends.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from shared.clock import Clock
from shared.egress.gate import Egress
from shared.errors import VoiceUnavailable
from shared.ids import IdGenerator

log = logging.getLogger(__name__)

OFFLINE = (
    "Voice needs an audio provider (OpenAI or Gemini), and Spark AI Agent is running "
    "without one here; type your message instead."
)


class VoiceAllowance(Protocol):
    """Each user's daily allowance of live-audio sessions, in their ledger (kept by
    ``shared/budget``'s ``Budget`` with their other daily allowances)."""

    async def check_tokens(self, user_id: str) -> None:
        """Raises ``RateLimited`` once today's tokens are spent."""
        ...

    async def grant_voice(self, user_id: str, session_id: str, provider: str, model: str) -> None:
        """Count one session and record its grant.

        Raises:
            RateLimited: today's sessions are used up; nothing was written.
        """
        ...

    async def record_voice(
        self, user_id: str, session_id: str, secret_hash: str, expires_at: datetime
    ) -> None:
        """Keep the hash of the session's secret."""
        ...

    async def withdraw_voice(self, user_id: str, session_id: str) -> None:
        """Forget a grant whose secret was not minted (its count given back)."""
        ...


@dataclass(frozen=True, slots=True)
class VoiceSession:
    """A live-audio session started for a user: what the browser needs, once."""

    session_id: str
    secret: str
    expires_at: datetime
    ends_at: datetime
    provider: str
    model: str


def secret_hash(secret: str) -> str:
    """How a secret is kept: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


class LiveSessions:
    """Starts live-audio sessions within each user's daily allowance."""

    def __init__(
        self,
        egress: Egress,
        allowance: VoiceAllowance,
        clock: Clock,
        ids: IdGenerator,
        opens_within: timedelta,
        lasts: timedelta,
    ) -> None:
        self._egress = egress
        self._allowance = allowance
        self._clock = clock
        self._ids = ids
        self._opens_within = opens_within
        self._lasts = lasts

    async def start(self, user_id: str) -> VoiceSession:
        """A new session's secret for ``user_id``.

        Raises:
            VoiceUnavailable: no audio provider (offline): nothing is counted.
            RateLimited: today's sessions, or today's tokens, are used up: nothing is
                minted.
            ProviderError: the provider minted nothing (the session is not counted).
            StoreError: the ledger could not be written (nothing was minted).
        """
        minter = self._egress.minter
        if minter is None:
            raise VoiceUnavailable(OFFLINE)
        provider, live_model = minter
        await self._allowance.check_tokens(user_id)
        session_id = self._ids.new("vs")
        await self._allowance.grant_voice(user_id, session_id, provider, live_model)
        began = self._clock.now()
        try:
            secret = await self._egress.mint(user_id, self._opens_within, self._lasts)
        except BaseException:
            try:
                await self._allowance.withdraw_voice(user_id, session_id)
            except Exception:  # it stays counted: one session of the day lost
                log.warning("voice session %s: its grant stays", session_id, exc_info=True)
            raise
        # Should this write fail, the grant has no hash: it cannot be redeemed, and
        # the secret (short-lived) is not handed out.
        await self._allowance.record_voice(
            user_id, session_id, secret_hash(secret.value), secret.expires_at
        )
        return VoiceSession(
            session_id,
            secret.value,
            secret.expires_at,
            began + self._lasts,
            provider,
            live_model,
        )
