"""An AI SDK chat's body is read as it arrives, by its shape: what the server ignores is
never built, nesting past the limit and parts past their caps are refused as soon as
they are seen, and the bodies one instance reads at once are held to a byte budget.

Memory is judged by ``tracemalloc``'s peak over the whole request (the body itself is
made before tracing starts), against a bound proportional to the body: reading the whole
body into objects first cost 40 times the body."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from spark_http import chatbody
from spark_http.budget import ByteBudget
from spark_http.chatbody import MAX_DEPTH, MAX_VALUES

from shared.errors import Busy
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.uichat import MAX_PARTS
from tests.unit.helpers import Harness, api_of, make_service, serving, until

CHAT = "/api/spark/agent/chat"
HEADERS = {"Authorization": "Bearer alice-token", "Content-Type": "application/json"}
MIB = 1024 * 1024


def posted(**extra: Any) -> bytes:
    """A chat turn as the transport posts it, with ``extra`` fields of its own."""
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hello"}]}
    return json.dumps({"id": "conv_body", "messages": [message], **extra}).encode()


def with_junk(head: bytes, items: bytes, size: int) -> bytes:
    """``head`` (a JSON object) with a field it ignores, ``junk``: an array of ``items``
    repeated to make the body about ``size`` bytes."""
    count = (size - len(head)) // (len(items) + 1)
    return head[:-1] + b', "junk": [' + b",".join([items] * count) + b"]}"


@pytest.fixture
def harness() -> Harness:
    return make_service(ScriptedProvider([Step.reply("Hi there.")]))


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(api_of(harness)) as client:
        yield client


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    yield
    tracemalloc.stop()


async def peak_of_post(client: httpx.AsyncClient, content: bytes) -> tuple[httpx.Response, int]:
    """The answer to posting ``content``, and the most memory the request held."""
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    response = await client.post(CHAT, headers=HEADERS, content=content)
    return response, tracemalloc.get_traced_memory()[1] - before


async def test_chat_body_ignored_field_of_many_elements_is_never_built(
    client: httpx.AsyncClient, traced: None
) -> None:
    content = with_junk(posted(), b'"' + b"x" * 20 + b'"', 8 * MIB)
    assert content.count(b",") > 300_000
    response, peak = await peak_of_post(client, content)
    assert response.status_code == 200, response.text
    assert "Hi there." in response.text
    assert peak < 3 * len(content), f"{peak:,} bytes for a body of {len(content):,}"


@pytest.mark.leaves_steps
async def test_chat_body_nesting_past_the_limit_is_400_as_soon_as_it_is_seen(
    client: httpx.AsyncClient, traced: None
) -> None:
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    content = with_junk(posted(first=json.loads(deep)), b'"' + b"x" * 20 + b'"', 8 * MIB)
    response, peak = await peak_of_post(client, content)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert f"deeper than {MAX_DEPTH} levels" in error["message"]
    assert peak < len(content), f"{peak:,} bytes for a body of {len(content):,}"


@pytest.mark.leaves_steps
async def test_chat_body_with_more_parts_than_a_message_may_have_is_refused_unbuilt(
    client: httpx.AsyncClient, traced: None
) -> None:
    part = b'{"type": "step-start"}'
    parts = b",".join([part] * (8 * MIB // (len(part) + 1)))
    content = b'{"id": "conv_body", "messages": [{"id": "m1", "role": "user", "parts": ['
    content += parts + b"]}]}"
    response, peak = await peak_of_post(client, content)
    assert 400 <= response.status_code < 500, response.text
    assert f"at most {MAX_PARTS}" in response.json()["error"]["message"]
    assert peak < len(content), f"{peak:,} bytes for a body of {len(content):,}"


@pytest.mark.leaves_steps
async def test_chat_body_of_more_values_than_the_cap_is_413(client: httpx.AsyncClient) -> None:
    content = with_junk(posted(), b"0", 2 * MAX_VALUES + 1000)
    response = await client.post(CHAT, headers=HEADERS, content=content)
    assert response.status_code == 413, response.text
    assert f"{MAX_VALUES:,} values" in response.json()["error"]["message"]


class Held:
    """A body that sends its first bytes, then waits to be let go before the rest."""

    def __init__(self, content: bytes) -> None:
        self.content = content
        self.started = asyncio.Event()
        self.go = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.content[:1000]
        self.started.set()
        await self.go.wait()
        yield self.content[1000:]


def padded(size: int) -> bytes:
    content = posted()
    return content + b" " * (size - len(content))


async def test_chat_bodies_past_the_instance_budget_are_503_with_retry_after() -> None:
    harness = make_service(ScriptedProvider([Step.reply("Hi there."), Step.reply("Hi again.")]))
    settings = {"chat_body_budget_bytes": 32 * MIB, "chat_body_wait_seconds": 0}
    async with serving(api_of(harness, replace(harness.settings, **settings))) as client:
        held = Held(padded(20 * MIB))
        headers = {**HEADERS, "Content-Length": str(len(held.content))}
        first = asyncio.ensure_future(client.post(CHAT, headers=headers, content=held))
        await until(lambda: held.started.is_set(), "the first body to start")
        second = padded(20 * MIB)
        refused = await client.post(CHAT, headers=HEADERS, content=second)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "busy"
        assert int(refused.headers["Retry-After"]) >= 1
        held.go.set()
        assert (await first).status_code == 200
        # Its room is given back once its files are kept: the next one fits.
        again = await client.post(CHAT, headers=HEADERS, content=padded(20 * MIB))
        assert again.status_code == 200, again.text


async def test_chat_body_budget_holds_a_body_until_room_is_given_back() -> None:
    budget = ByteBudget(100)
    taken: list[int] = []

    async def second() -> None:
        async with budget.held(50, wait=30):
            taken.append(2)

    async with budget.held(80, wait=0):
        waiting = asyncio.ensure_future(second())
        await until(lambda: budget.waiting == 1, "the second body to wait")
        assert taken == []
    await waiting
    assert taken == [2]
    async with budget.held(100, wait=0):
        with pytest.raises(Busy):
            async with budget.held(1, wait=0):
                pass


@pytest.mark.leaves_steps
@pytest.mark.parametrize(
    "content",
    [
        b'{"id": "conv_body", "messages": [], "n": ' + b"9" * 5000 + b"}",
        b'{"id": "conv_body", "messages": [], "n": NaN}',
        b'{"id": "conv_body", "messages": []} {}',
        b'{"id": "conv_body", "messages": [',
        b'["conv_body"]',
        b'{"id": "\xff"}',
        # Objects and arrays where a string or a list is read: refused by their type.
        posted(id={"a": {"b": 1}}),
        posted(messages={"a": [1]}),
        b'{"id": "conv_body", "messages": [{"id": "m", "role": "user", "parts": {"a": 1}}]}',
        b'{"id": "conv_body", "messages": [[{"id": "m", "role": "user", "parts": []}]]}',
    ],
)
async def test_chat_body_that_is_not_a_json_object_is_400(
    client: httpx.AsyncClient, content: bytes
) -> None:
    response = await client.post(CHAT, headers=HEADERS, content=content)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.leaves_steps
@pytest.mark.parametrize(
    "junk",
    [
        b"[" * (2 * MIB),
        # Long keys nested deep: a path that joins every key above a value would hold
        # the keys' length times the depth.
        b"".join(b'{"' + bytes([97 + n]) * (256 * 1024) + b'": ' for n in range(20))
        + b"0"
        + b"}" * 20,
    ],
)
async def test_chat_body_nested_hostile_shapes_are_read_in_bounded_memory(
    client: httpx.AsyncClient, traced: None, junk: bytes
) -> None:
    content = posted()[:-1] + b', "junk": ' + junk + b"}"
    response, peak = await peak_of_post(client, content)
    assert response.status_code in (200, 400), response.text
    assert peak < 3 * len(content), f"{peak:,} bytes for a body of {len(content):,}"


async def test_the_switch_interval_is_short_while_bodies_are_parsed_and_restored_after() -> None:
    """While a worker parses, the loop gets the GIL back within half a millisecond, not
    the default five (the other streams' pace: ``bench/chat_memory.py --gap``); once no
    body is parsed, whatever happened to them, the process's own interval is back."""
    before = sys.getswitchinterval()
    seen: list[float] = []
    release = threading.Event()

    def parse() -> None:
        seen.append(sys.getswitchinterval())
        release.wait()

    def fail() -> None:
        raise ValueError("a bad body")

    first = asyncio.ensure_future(chatbody._parsed(parse))
    second = asyncio.ensure_future(chatbody._parsed(parse))
    with pytest.raises(ValueError, match="a bad body"):
        await chatbody._parsed(fail)
    assert sys.getswitchinterval() == chatbody._PARSING_SWITCH_SECONDS  # two still parse
    release.set()
    await asyncio.gather(first, second)
    assert seen == [chatbody._PARSING_SWITCH_SECONDS] * 2
    assert sys.getswitchinterval() == before
