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


_LENGTH = 20
_BASE = len(_ALPHABET)
_SPACE = _BASE**_LENGTH


class RandomIds:
    """20 random base-36 characters (~103 bits) after the prefix.

    Drawn from one read of 16 random bytes, their number taken modulo 36**20 (a bias
    below 4e-8): ``secrets.choice`` per character read the system's randomness 20
    times an id, and a message draws three ids before its model request is sent
    (bench/stream_overhead.py (a) measures the difference)."""

    def new(self, prefix: str) -> str:
        number = int.from_bytes(secrets.token_bytes(16), "big") % _SPACE
        characters = []
        for _ in range(_LENGTH):
            number, digit = divmod(number, _BASE)
            characters.append(_ALPHABET[digit])
        return prefix + "_" + "".join(characters)


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


def task_id_for(conversation_id: str, tool_call_id: str) -> str:
    """The task of one tool call in one conversation: the key of its ledger record, its
    section and its entry in the conversation, derived as a tool call's own id is."""
    return derived("task", conversation_id, tool_call_id)


def reserved(document_id: str) -> bool:
    """Firestore reserves ids of the form ``__x__`` (it refuses them as ids and as map
    keys): nothing we keep can have one, so the edge, the agent and the stores treat it
    as naming nothing (not found)."""
    return document_id.startswith("__") and document_id.endswith("__")
