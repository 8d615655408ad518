"""Who may call the ``tasks`` function: only our Cloud Tasks queue.

In production every call must carry a Google-signed OIDC token for our service
account (``oidc.py``). Locally the emulator sends none, so calls must carry the
HMAC signature our queue adapter adds with the local key; that mode is refused in
production (``Settings.check``).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Protocol

from shared.errors import Unauthenticated
from shared.queue.base import SIGNATURE_HEADER, sign

REFUSED = "Only Spark AI Agent's task queue may call this endpoint."


class TaskCallerVerifier(Protocol):
    async def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        """Accept the call or raise.

        Raises:
            Unauthenticated: the call does not prove it comes from our queue.
            Forbidden: it comes from someone else's identity.
            AuthUnavailable: the proof cannot be checked right now.
        """
        ...


class LocalTaskVerifier:
    """Accepts calls whose body carries a valid local signature."""

    def __init__(self, key: str) -> None:
        self._key = key

    async def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        signature = headers.get(SIGNATURE_HEADER.lower()) or headers.get(SIGNATURE_HEADER) or ""
        expected = sign(self._key, body).encode()
        # Compared as bytes: a forged header may hold characters compare_digest refuses as str.
        if not signature or not hmac.compare_digest(signature.encode(errors="replace"), expected):
            raise Unauthenticated(REFUSED)


class RefuseAllTaskCalls:
    """Local runs without a local key cannot tell our calls from anyone's: refuse them."""

    async def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        raise Unauthenticated(REFUSED + " (Set SPARK_TASKS_LOCAL_KEY to run tasks locally.)")
