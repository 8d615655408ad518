"""The opt-out decided at the egress alone (``shared/egress/screen.py``): a stored
``read_family_messages`` result is screened in every request that leaves, whoever
built it (a run's step, a head start's read begun ahead, a task tool's own call), on
the settings as the store holds them at that request."""

from __future__ import annotations

import json

from shared.clock import SystemClock
from shared.egress.gate import Egress
from shared.egress.provenance import InMemoryProvenanceStore
from shared.egress.screen import AUTHOR_OPTED_OUT, OWNER_OPTED_OUT, Screen
from shared.families.preferences import Preferences
from shared.llm.base import ChatMessage, ModelRequest, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.store.memory import InMemorySettingsStore
from shared.tools.quoting import READ_TOOL, Quoted, quote
from tests.unit.helpers import FreeBudget

BOB_SAYS = "Pick up the dry cleaning on Thursday, please."
SAM_SAYS = "Can I go to Ella's party on Saturday afternoon?"
AT = "2026-01-01T10:00:00+00:00"


def request() -> ModelRequest:
    """Alice's request whose history holds a read of Bob's and Sam's messages (read
    before any record of what was given was kept: the screen knows them only from the
    result's marks)."""
    result = quote(
        [
            Quoted("bob", "Bob", "parent", "family", AT, BOB_SAYS),
            Quoted("sam", "Sam", "dependent", "family", AT, SAM_SAYS),
        ],
        8_000,
    )
    history = [
        ChatMessage("user", "What did the family say?"),
        ChatMessage("assistant", "", tool_calls=(ToolCallRequest("c1", READ_TOOL, "{}"),)),
        ChatMessage("tool", json.dumps(result), tool_call_id="c1", name=READ_TOOL),
    ]
    return ModelRequest(system="Answer.", messages=history)


def egress(settings: InMemorySettingsStore, steps: int) -> tuple[Egress, ScriptedProvider]:
    provider = ScriptedProvider([Step.reply("ok") for _ in range(steps)])
    screen = Screen(InMemoryProvenanceStore(), Preferences(settings, SystemClock()))
    return Egress(provider, screen, FreeBudget()), provider


def said(request: ModelRequest) -> str:
    return json.dumps([(t.text, [c.arguments for c in t.tool_calls]) for t in request.messages])


async def test_a_read_result_is_screened_in_every_kind_of_request() -> None:
    settings = InMemorySettingsStore()
    await Preferences(settings, SystemClock()).update("bob", ai_reads_family_messages=False)
    gate, provider = egress(settings, 3)

    assert [e async for e in await gate.chat("alice", request())]
    # A head start's read begins before its request is built: it did not know the
    # request names Bob, so the request is screened on a read that does.
    screening = gate.screening("alice")
    assert [e async for e in await gate.chat("alice", request(), screening)]
    await screening.close()
    assert await gate.complete("alice", request(), "The draft") == "ok"

    assert len(provider.requests) == 3
    for sent in provider.requests:
        assert BOB_SAYS not in said(sent) and SAM_SAYS in said(sent)
        assert AUTHOR_OPTED_OUT in said(sent)


async def test_each_request_reads_the_settings_afresh() -> None:
    """Nothing is remembered between requests: an opt-out holds from the next request,
    and so does turning reading back on."""
    settings = InMemorySettingsStore()
    preferences = Preferences(settings, SystemClock())
    gate, provider = egress(settings, 4)

    async def send() -> str:
        reads = settings.reads
        assert [e async for e in await gate.chat("alice", request())]
        assert settings.reads == reads + 1  # one read, of the reader and every member named
        return said(provider.requests[-1])

    assert BOB_SAYS in await send()
    await preferences.update("bob", ai_reads_family_messages=False)
    assert BOB_SAYS not in await send()
    await preferences.update("bob", ai_reads_family_messages=True)
    assert BOB_SAYS in await send()
    await preferences.update("alice", ai_reads_family_messages=False)
    shown = await send()
    assert BOB_SAYS not in shown and SAM_SAYS not in shown and OWNER_OPTED_OUT in shown
