"""Who may call the ``tasks`` function: only our Cloud Tasks queue.

In production every call must carry a Google-signed OIDC token for our service
account (``oidc.py``). Locally the emulator sends none, so calls must carry the
HMAC signature our queue adapter adds with the local key; that mode is refused in
production (``Settings.check``).
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from shared.errors import Unauthenticated
from shared.queue.base import (
    SIGNATURE_HEADER,
    SIGNATURE_MAX_AGE_SECONDS,
    TASK_NAME_HEADER,
    sign,
)

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
    """Accepts calls whose local signature is valid, names the task the queue says it
    is delivering, and is recent (``SIGNATURE_MAX_AGE_SECONDS``), so a captured call
    cannot be replayed later or for another task."""

    def __init__(self, key: str, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self._clock = clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        raw = _header(headers, SIGNATURE_HEADER)
        name = _header(headers, TASK_NAME_HEADER)
        fields = dict(part.partition("=")[::2] for part in raw.split(","))
        at = fields.get("t", "")
        if not name or not re.fullmatch(r"[0-9]{1,12}", at) or not fields.get("v1"):
            raise Unauthenticated(REFUSED)
        age = self._clock() - int(at)
        if age > SIGNATURE_MAX_AGE_SECONDS or age < -60:
            raise Unauthenticated(REFUSED)
        expected = sign(self._key, body, name, int(at)).encode()
        # Compared as bytes: a forged header may hold characters compare_digest refuses as str.
        if not hmac.compare_digest(raw.encode(errors="replace"), expected):
            raise Unauthenticated(REFUSED)


def _header(headers: Mapping[str, str], name: str) -> str:
    return headers.get(name.lower()) or headers.get(name) or ""


class RefuseAllTaskCalls:
    """Local runs without a local key cannot tell our calls from anyone's: refuse them."""

    async def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        raise Unauthenticated(REFUSED + " (Set SPARK_TASKS_LOCAL_KEY to run tasks locally.)")
