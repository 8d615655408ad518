"""A provider's prompt cache, modelled for the fake providers and the benchmark.

A request is read as the sequence of units its provider caches a prefix of, in the order
the model reads them (``units``): OpenAI Chat Completions its tools, then its messages;
Anthropic Messages its tools, its system blocks, then each content block of each turn
(``tool_result`` blocks included); Gemini its system instruction, its tools, then each
part of each turn. A unit is its JSON as sent, less Anthropic's ``cache_control`` (a
breakpoint marks where to cache, it is not part of what is cached).

``PromptCache.read`` answers, for one request, how many of its input tokens were read
from the cache, as each provider keys it:

* OpenAI: automatically, the longest prefix an earlier request with the same
  ``prompt_cache_key`` (or, without one, any earlier request) sent;
* Anthropic: only prefixes that end at a breakpoint (``cache_control``) of an earlier
  request, read back when this request has one at or after it;
* Gemini: implicitly, the longest prefix any earlier request sent.

Tokens are estimated as four characters each; a provider's minimum cacheable prefix
(1,024 tokens or more) is left out, so short prompts cache in the fakes when they
would not at a provider. ``extends(before, after, wire)`` says whether one request is
the other with units added at its end (the property the history window keeps).
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

Wire = Literal["openai", "anthropic", "gemini"]
CHARS_PER_TOKEN = 4


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _dump(value: Any) -> str:
    return json.dumps(_unmarked(value), ensure_ascii=False)


def _blocks(content: Any) -> list[Any]:
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def units(body: dict[str, Any], wire: Wire) -> list[str]:
    """What ``body`` says, as the units its provider caches a prefix of, in order."""
    if wire == "openai":
        head = [_dump(body.get("tools") or [])]
        return head + [_dump(m) for m in body.get("messages") or []]
    if wire == "anthropic":
        system = body.get("system") or ""
        head = [_dump(body.get("tools") or []), *(_dump(b) for b in _blocks(system))]
        return head + [
            _dump({"role": turn["role"], **block})
            for turn in body.get("messages") or []
            for block in _blocks(turn["content"])
        ]
    head = [_dump(body.get("systemInstruction") or {}), _dump(body.get("tools") or [])]
    return head + [
        _dump({"role": turn.get("role"), **part})
        for turn in body.get("contents") or []
        for part in turn.get("parts") or []
    ]


def _breakpoints(body: dict[str, Any]) -> list[int]:
    """(Anthropic) the number of units up to and including each breakpoint, in order."""
    ends: list[int] = []
    tools = body.get("tools") or []
    if any("cache_control" in t for t in tools):
        ends.append(1)
    count = 1
    system = body.get("system") or ""
    for block in _blocks(system):
        count += 1
        if isinstance(block, dict) and "cache_control" in block:
            ends.append(count)
    for turn in body.get("messages") or []:
        for block in _blocks(turn["content"]):
            count += 1
            if isinstance(block, dict) and "cache_control" in block:
                ends.append(count)
    return ends


def tokens(parts: list[str]) -> int:
    """The tokens ``parts`` take, estimated."""
    return math.ceil(sum(len(p) for p in parts) / CHARS_PER_TOKEN)


def extends(before: dict[str, Any], after: dict[str, Any], wire: Wire) -> bool:
    """Whether ``after`` is ``before`` with units added at its end (or the same)."""
    old, new = units(before, wire), units(after, wire)
    return new[: len(old)] == old


def extending(bodies: list[dict[str, Any]], wire: Wire) -> float:
    """The share of ``bodies``' consecutive pairs in which the later extends the earlier."""
    pairs = list(pairwise(bodies))
    return sum(extends(a, b, wire) for a, b in pairs) / len(pairs) if pairs else 1.0


def head(body: dict[str, Any], wire: Wire) -> list[str]:
    """What a request says before its turns: its tools and system prompt."""
    return units(body, wire)[:2]


@dataclass
class Read:
    """What one request cost: its input tokens, and those read from the cache."""

    input_tokens: int
    cached_tokens: int

    @property
    def uncached_tokens(self) -> int:
        return self.input_tokens - self.cached_tokens


@dataclass
class PromptCache:
    """One provider's cache, for the requests one fake server is sent (thread-safe: the
    fake serves on its own thread)."""

    wire: Wire
    # The prefixes cached, by key: each a tuple of units.
    _kept: dict[str, set[tuple[str, ...]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _key(self, body: dict[str, Any]) -> str:
        if self.wire == "openai":
            return str(body.get("prompt_cache_key") or "")
        return ""  # Anthropic's and Gemini's caches are keyed by the prefix alone

    def read(self, body: dict[str, Any]) -> Read:
        """The cache's answer to ``body`` (and what it keeps of it for later requests)."""
        said = units(body, self.wire)
        with self._lock:
            kept = self._kept.setdefault(self._key(body), set())
            if self.wire == "anthropic":
                ends = _breakpoints(body)
                # A cached prefix is read when the request marks a breakpoint at or past it.
                last = max(ends, default=0)
                hit = max(
                    (n for n in range(last, 0, -1) if tuple(said[:n]) in kept),
                    default=0,
                )
                kept.update(tuple(said[:n]) for n in ends)
            else:
                longest = (n for n in range(len(said), 0, -1) if tuple(said[:n]) in kept)
                hit = max(longest, default=0)
                # Every prefix ending at a unit is kept (the providers cache in blocks of
                # tokens; a unit is the fakes' block).
                kept.update(tuple(said[:n]) for n in range(1, len(said) + 1))
        return Read(tokens(said), tokens(said[:hit]))
