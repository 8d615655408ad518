"""An Anthropic Messages server of our own, on loopback.

Real HTTP and the real SSE events (``message_start``, ``content_block_start``,
``content_block_delta`` with ``text_delta`` / ``input_json_delta`` / ``thinking_delta``
/ ``signature_delta``, ``content_block_stop``, ``message_delta``, ``message_stop``,
``ping`` and ``error``), so the real ``anthropic`` client talks to it. It plays the
same ``Script`` as the OpenAI fake, chosen by the last user message's text.

Run standalone (``make dev`` with ``SPARK_DEV_FAKE=1``): ``python -m
tests.fakes.anthropic_server --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.openai_server import Script, _Dropped, hold_before
from tests.fakes.prompt_cache import PromptCache, Read

SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1mYWtl"
THOUGHT = "The user wants a tool; I will call it."

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def event(kind: str, data: dict[str, Any]) -> bytes:
    """One SSE event as the Messages API sends it: ``event:`` then ``data:``."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def text_delta(index: int, text: str) -> bytes:
    return event(
        "content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": text}}
    )


def message_start(input_tokens: int = 3, read: Read | None = None) -> bytes:
    """``message_start``, its usage ``input_tokens``, or, with a prompt cache's ``read``,
    what the request took beyond the cache and what it read from it."""
    usage = {"input_tokens": input_tokens, "output_tokens": 1}
    if read is not None:
        usage["input_tokens"] = read.uncached_tokens
        usage["cache_creation_input_tokens"] = 0
        usage["cache_read_input_tokens"] = read.cached_tokens
    message = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "fake-model",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return event("message_start", {"message": message})


def message_end(stop_reason: str, output_tokens: int, stop: bool = True) -> bytes:
    delta = {
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }
    return event("message_delta", delta) + (event("message_stop", {}) if stop else b"")


def _user_text(message: dict[str, Any]) -> str | None:
    """The text of a user turn, or ``None`` for a turn of tool results only."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    texts = [b.get("text", "") for b in content or () if b.get("type") == "text"]
    if not texts and any(b.get("type") == "tool_result" for b in content or ()):
        return None
    return "".join(texts)


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            text = _user_text(message)
            if text is not None:
                return text
    return ""


def ends_with_results(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def decode(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a request says, in the conformance suite's neutral terms."""
    items: list[tuple[Any, ...]] = [
        ("tool", t["name"], t["input_schema"]) for t in body.get("tools") or []
    ]
    system = body.get("system")
    if system:  # a string, or text blocks (with a cache breakpoint)
        text = system if isinstance(system, str) else "".join(b["text"] for b in system)
        items.append(("system", text))
    names: dict[str, str] = {}
    for message in body.get("messages") or []:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        role = message["role"]
        for block in content:
            kind = block["type"]
            if kind == "text":
                items.append((role, block["text"]))
            elif kind == "image":
                source = block["source"]
                items.append(("image", source["media_type"], source["data"]))
            elif kind == "tool_use":
                names[block["id"]] = block["name"]
                items.append(("call", block["name"], block["input"]))
            elif kind == "tool_result":
                output = json.loads(block["content"])
                name = names.get(block["tool_use_id"], "?")
                items.append(("result", name, output, bool(block.get("is_error"))))
            else:
                items.append(("state", kind))
    return items


class FakeAnthropic:
    """The fake server's state and its Starlette app."""

    def __init__(self, default: Script | None = None) -> None:
        self.default = default or Script()
        self.scripts: dict[str, Script] = {}
        self.requests: list[dict[str, Any]] = []
        # A prompt cache, when set (``prompt_cache.py``): each request's usage then
        # counts what it read from the cache apart (``reads``, in order).
        self.cache: PromptCache | None = None
        self.reads: list[Read] = []
        self.app = Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])

    def script(self, trigger: str, script: Script) -> None:
        """Answer with ``script`` whenever the last user message is ``trigger``."""
        self.scripts[trigger] = script

    def requests_for(self, trigger: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if last_user_text(r) == trigger]

    async def _messages(self, request: Request) -> Response:
        if not request.headers.get("x-api-key") or not request.headers.get("anthropic-version"):
            # As the API answers a request without its key or its version.
            error = {"type": "authentication_error", "message": "x-api-key and version needed"}
            return JSONResponse({"type": "error", "error": error}, status_code=401)
        body = await request.json()
        self.requests.append(body)
        read = self.cache.read(body) if self.cache is not None else None
        if read is not None:
            self.reads.append(read)
        script = self.scripts.get(last_user_text(body), self.default)
        if ends_with_results(body) and script.then is not None:
            script = script.then
        if script.status is not None:
            kind = _ERROR_TYPES.get(script.status, "api_error")
            return JSONResponse(
                {
                    "type": "error",
                    "error": {"type": kind, "message": f"scripted failure {script.status}"},
                },
                status_code=script.status,
                headers={"retry-after-ms": "1", "x-should-retry": "true"},
            )
        return StreamingResponse(self._stream(script, read), media_type="text/event-stream")

    async def _stream(self, script: Script, read: Read | None = None) -> AsyncIterator[bytes]:
        if script.first_delay:
            await asyncio.sleep(script.first_delay)
        await hold_before(script, 0)
        yield message_start(read=read)
        yield event("ping", {})
        index = 0
        if script.thinking:
            start = {"type": "thinking", "thinking": "", "signature": ""}
            yield event("content_block_start", {"index": 0, "content_block": start})
            for delta in (
                {"type": "thinking_delta", "thinking": THOUGHT},
                {"type": "signature_delta", "signature": SIGNATURE},
            ):
                yield event("content_block_delta", {"index": 0, "delta": delta})
            yield event("content_block_stop", {"index": 0})
            index = 1
        if script.chunks:
            start = {"type": "text", "text": ""}
            yield event("content_block_start", {"index": index, "content_block": start})
        for n, text in enumerate(script.chunks):
            await hold_before(script, n)
            if script.disconnect_after is not None and n >= script.disconnect_after:
                raise _Dropped
            if script.error_after is not None and n >= script.error_after:
                error = {"type": "overloaded_error", "message": "Overloaded"}
                yield event("error", {"error": error})
                return
            if script.delay and n:
                await asyncio.sleep(script.delay)
            yield text_delta(index, text)
        await hold_before(script, len(script.chunks))
        if script.chunks:
            yield event("content_block_stop", {"index": index})
            index += 1
        for n, (name, arguments) in enumerate(script.tool_calls):
            start = {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": {}}
            yield event("content_block_start", {"index": index, "content_block": start})
            half = len(arguments) // 2
            for part in (arguments[:half], arguments[half:]):
                delta = {"type": "input_json_delta", "partial_json": part}
                yield event("content_block_delta", {"index": index, "delta": delta})
            yield event("content_block_stop", {"index": index})
            index += 1
        if script.finish:
            reason = "tool_use" if script.tool_calls else "end_turn"
            yield message_end(reason, len(script.chunks), script.stop_event)


def dev_fake() -> FakeAnthropic:
    """The fake ``make dev`` runs: a short reply, and "use a skill" for a tool round trip."""
    fake = FakeAnthropic()
    fake.script(
        "use a skill",
        Script(
            chunks=["Let me", " look that up."],
            tool_calls=[("load_skill", json.dumps({"skill": "lesson-planning"}))],
            then=Script(chunks=["I have", " the lesson-planning", " skill now."]),
        ),
    )
    return fake


def main() -> None:
    parser = argparse.ArgumentParser(description="Anthropic Messages fake for local runs.")
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvicorn.run(dev_fake().app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
