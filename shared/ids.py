"""Identifiers, behind a small interface so tests can predict them."""

from __future__ import annotations

import hashlib
import itertools
import secrets
from typing import Protocol

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


class IdGenerator(Protocol):
    """Makes unique identifiers for conversations, messages and runs."""

    def new(self, prefix: str) -> str:
        """A fresh id such as ``msg_4k2...``; unique across processes."""
        ...


class RandomIds:
    """20 random base-36 characters (~103 bits) after the prefix."""

    def new(self, prefix: str) -> str:
        return prefix + "_" + "".join(secrets.choice(_ALPHABET) for _ in range(20))


class SequentialIds:
    """Predictable ids for tests: ``msg_1``, ``msg_2``, ..."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter)}"


def derived(prefix: str, *parts: str) -> str:
    """A deterministic id for the work named by ``parts`` (the same work, the same id:
    redeliveries and retries find what an earlier delivery did instead of doing it again)."""
    return prefix + "_" + hashlib.sha256("/".join(parts).encode()).hexdigest()[:24]
