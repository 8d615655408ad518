"""An OpenAI-compatible Chat Completions server of our own, on loopback.

Real HTTP and real SSE chunks, so the real ``openai`` client talks to it. What it
answers is chosen by the last user message: ``script(trigger, Script(...))``;
anything else gets a short default reply. Scripts can stream text and tool-call
fragments, pace tokens, answer with an HTTP error, or drop the connection midway.

It also answers ``audio.transcriptions`` (multipart upload; streamed as
``transcript.text.delta`` events then ``transcript.text.done`` when ``stream`` is set,
one JSON object otherwise). It cannot hear: ``hear(clip, text)`` says what a clip's
exact bytes say; any other clip is heard as nothing (an empty transcript).

And ``moderations`` (``omni-moderation-latest``'s answer, every category named): text is
judged by the offline moderator's word list (``shared/egress/offline_moderator.py``), an
image by its exact bytes (``flag_image``); ``moderation_hold`` holds every verdict until
the test releases it (a slow or hanging moderator), ``moderation_status`` answers with
that HTTP error instead.

Run standalone (for benchmarks): ``python -m tests.fakes.openai_server --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import email.parser
import email.policy
import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shared.egress.offline_moderator import judged
from tests.fakes.prompt_cache import PromptCache, Read

# omni-moderation's categories, by the category of ours each one is.
MODERATION_CATEGORIES = {
    "harassment": ("harassment", "harassment/threatening"),
    "hate": ("hate", "hate/threatening"),
    "illicit": ("illicit", "illicit/violent"),
    "self_harm": ("self-harm", "self-harm/intent", "self-harm/instructions"),
    "sexual": ("sexual", "sexual/minors"),
    "violence": ("violence", "violence/graphic"),
}


@dataclass
class Script:
    """One scripted answer.

    ``chunks`` are streamed as content deltas ``delay`` seconds apart; then each of
    ``tool_calls`` (name, arguments JSON) in two fragments; then the finish reason.
    ``status`` answers with that HTTP error instead. ``disconnect_after`` drops the
    connection after that many chunks; ``finish=False`` ends the stream cleanly
    (``[DONE]``) but without a finish reason. ``error_after`` sends an in-stream
    ``{"error": ...}`` chunk after that many chunks, as OpenAI does on server errors.
    ``stop_event=False`` sends the finish reason but cuts the stream just before its
    very last event (Anthropic's ``message_stop``). ``then`` answers instead when the
    request ends with tool results (the agent's next step after its tools ran);
    its own ``then``, after the next round, and so on.
    ``hold`` stops the stream before chunk ``hold.at`` (``at=0``: before anything;
    ``len(chunks)``: after the text, before any tool call and the finish) until
    the test releases it: a model that is mid-reply, or silent, for exactly as long as a
    test needs, on a machine of any speed (``delay`` only paces).
    ``thinking`` makes a provider that keeps opaque state write some (Anthropic: a
    signed thinking block; Gemini: a thought signature on each call); OpenAI's has
    none. The Anthropic and Gemini fakes play the same scripts in their own formats.
    """

    chunks: list[str] = field(default_factory=lambda: ["Hello", " from", " the", " fake."])
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    delay: float = 0.0
    first_delay: float = 0.0
    status: int | None = None
    disconnect_after: int | None = None
    error_after: int | None = None
    finish: bool = True
    stop_event: bool = True
    thinking: bool = False
    then: Script | None = None
    hold: Hold | None = None


class Hold:
    """Where a scripted stream waits for the test: chunks before ``at`` go out at once,
    the rest once ``release`` is called (``release(upto)``: only those before ``upto``).

    ``held`` is set once a stream is waiting at the hold (everything before it sent), so
    a test can wait for "the model is mid-reply" instead of sleeping. Threads of the test
    and the fake server's loop share it. A test must release every hold it makes (in a
    ``finally``), or the run waiting on it stays open until the provider's idle timeout.
    """

    def __init__(self, at: int = 0) -> None:
        self._limit: float = at
        self._lock = threading.Lock()
        self.held = threading.Event()

    def release(self, upto: int | None = None) -> None:
        """Let the stream go on: every chunk, or those before ``upto``."""
        with self._lock:
            self._limit = float("inf") if upto is None else max(self._limit, upto)
            self.held.clear()

    def wait_held(self, what: str = "the model's stream to reach its hold") -> None:
        """Block until a stream waits at the hold (a safety net of 60 s)."""
        if not self.held.wait(60):
            raise AssertionError(f"gave up after 60 s waiting for {what}")

    async def passing(self, n: int) -> None:
        """Return once chunk ``n`` may be sent (polled: the server's loop never blocks)."""
        while True:
            with self._lock:
                if n < self._limit:
                    return
                self.held.set()
            await asyncio.sleep(0.01)


async def hold_before(script: Script, n: int) -> None:
    """Wait, if ``script`` holds before chunk ``n``, until the test releases it."""
    if script.hold is not None:
        await script.hold.passing(n)


class _Dropped(Exception):
    """Raised inside the body to make the server drop the connection."""


def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
    """One Chat Completions SSE chunk (a usage-only chunk when ``usage`` is given)."""
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["choices"] = []
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class FakeOpenAI:
    """The fake server's state and its Starlette app."""

    def __init__(self, default: Script | None = None) -> None:
        self.default = default or Script()
        self.scripts: dict[str, Script] = {}
        self.afterwards: dict[str, Script] = {}
        self.requests: list[dict[str, Any]] = []
        # Voice: each Realtime client secret minted (its request and value), and each
        # speech request, so tests count the provider's calls.
        self.secrets: list[tuple[dict[str, Any], str]] = []
        self.speeches: list[dict[str, Any]] = []
        self.heard: dict[str, str] = {}
        self.transcriptions: list[dict[str, Any]] = []
        # Moderation: each request's body, the images flagged (by their base64) and
        # their category, and what holds or fails every verdict.
        self.moderations: list[dict[str, Any]] = []
        self.flagged_images: dict[str, str] = {}
        self.moderation_hold: Hold | None = None
        self.moderation_status: int | None = None
        # Every chat and speech request as it arrived ((time.monotonic(), body)), so a
        # test can judge each one against what held at that moment.
        self.wire: list[tuple[float, dict[str, Any]]] = []
        # Answers chat requests itself when set (a test's own model, e.g. a parrot
        # repeating what it is given), ahead of any script; ``None``: not its request.
        self.answer: Callable[[dict[str, Any]], Script | None] | None = None
        # A prompt cache, when set (``prompt_cache.py``): each chat request's usage then
        # counts its input and the part of it read from the cache (``reads``, in order).
        self.cache: PromptCache | None = None
        self.reads: list[Read] = []
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/v1/realtime/client_secrets", self._client_secret, methods=["POST"]),
                Route("/v1/audio/speech", self._speech, methods=["POST"]),
                Route("/v1/audio/transcriptions", self._transcribe, methods=["POST"]),
                Route("/v1/moderations", self._moderate, methods=["POST"]),
            ]
        )

    def hear(self, clip: bytes, text: str) -> None:
        """Transcribe exactly these bytes as ``text``."""
        self.heard[hashlib.sha256(clip).hexdigest()] = text

    async def _transcribe(self, request: Request) -> Response:
        form = _multipart(request.headers["content-type"], await request.body())
        clip, name, media_type = form["file"]
        said = {"model": form["model"][0].decode(), "name": name, "type": media_type}
        said["stream"] = form.get("stream", (b"false",))[0] == b"true"
        said["size"] = len(clip)
        self.transcriptions.append(said)
        text = self.heard.get(hashlib.sha256(clip).hexdigest(), "")
        if not said["stream"]:
            return JSONResponse({"text": text, "usage": {"type": "duration", "seconds": 3.2}})

        async def events() -> AsyncIterator[bytes]:
            for n, word in enumerate(text.split(" ") if text else []):
                delta = {"type": "transcript.text.delta", "delta": word if n == 0 else " " + word}
                yield b"data: " + json.dumps(delta).encode() + b"\n\n"
            usage = {"type": "tokens", "input_tokens": 40, "output_tokens": 12, "total_tokens": 52}
            done = {"type": "transcript.text.done", "text": text, "usage": usage}
            yield b"data: " + json.dumps(done).encode() + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    def flag_image(self, data_base64: str, category: str) -> None:
        """Flag an image of exactly these bytes (base64, as sent) as ``category`` (ours:
        ``self_harm``, ``sexual``...)."""
        self.flagged_images[data_base64] = category

    async def _moderate(self, request: Request) -> Response:
        """``POST /v1/moderations``, as OpenAI answers it: one result for the input, each
        category named with a flag and a score, and the input types each applied to."""
        body = await request.json()
        self.moderations.append(body)
        self.wire.append((time.monotonic(), body))
        if self.moderation_hold is not None:
            await self.moderation_hold.passing(0)
        if self.moderation_status is not None:
            error = {"message": "scripted failure", "type": "server_error", "code": None}
            return JSONResponse({"error": error}, status_code=self.moderation_status)
        parts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        found: dict[str, list[str]] = {}
        for part in parts:
            if isinstance(part, str) or part.get("type") == "text":
                text = part if isinstance(part, str) else part["text"]
                for category in judged(text).categories:
                    found.setdefault(category, []).append("text")
            else:
                data = part["image_url"]["url"].partition("base64,")[2]
                category = self.flagged_images.get(data)
                if category is not None:
                    found.setdefault(category, []).append("image")
        flags: dict[str, bool] = {}
        scores: dict[str, float] = {}
        applied: dict[str, list[str]] = {}
        for ours, names in MODERATION_CATEGORIES.items():
            for n, name in enumerate(names):
                on = ours in found and n == 0
                flags[name] = on
                scores[name] = 0.93 if on else 0.0004
                applied[name] = found.get(ours, []) if on else []
        result = {
            "flagged": bool(found),
            "categories": flags,
            "category_scores": scores,
            "category_applied_input_types": applied,
        }
        model = body.get("model") or "omni-moderation-latest"
        return JSONResponse(
            {"id": f"modr-{len(self.moderations)}", "model": model, "results": [result]}
        )

    def script(self, trigger: str, script: Script, after: Script | None = None) -> None:
        """Answer with ``script`` whenever the last user message is ``trigger``, or, when
        no script has its whole text, its first paragraph is (attachments' notes, a
        brief, a document follow it); with ``after``, only the first time, and with
        ``after`` from then on (a failure, then a success on the retry)."""
        self.scripts[trigger] = script
        if after is not None:
            self.afterwards[trigger] = after

    def requests_for(self, trigger: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if trigger in _said(r)]

    async def _client_secret(self, request: Request) -> Response:
        """``POST /v1/realtime/client_secrets``, as OpenAI answers it: the secret, its
        expiry (seconds since the epoch) and the session it configures."""
        body = await request.json()
        value = f"ek_fake_{len(self.secrets) + 1}_{int(time.time() * 1000)}"
        self.secrets.append((body, value))
        seconds = int((body.get("expires_after") or {}).get("seconds") or 600)
        session = {"type": "transcription", "id": f"sess_{len(self.secrets)}", "object": ""}
        session.update(body.get("session") or {})
        return JSONResponse(
            {"value": value, "expires_at": int(time.time()) + seconds, "session": session}
        )

    async def _speech(self, request: Request) -> Response:
        """``POST /v1/audio/speech``: "audio" streamed in a few chunks (a fake MP3 frame
        header, then the input's bytes), as chunked transfer like OpenAI's."""
        body = await request.json()
        self.speeches.append(body)
        self.wire.append((time.monotonic(), body))
        text = str(body.get("input") or "").encode()

        async def audio() -> AsyncIterator[bytes]:
            yield b"\xff\xfb\x90\x64"  # an MPEG-1 Layer III frame header
            for start in range(0, len(text), 64):
                yield text[start : start + 64]

        return StreamingResponse(audio(), media_type="audio/mpeg")

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.wire.append((time.monotonic(), body))
        read = self.cache.read(body) if self.cache is not None else None
        if read is not None:
            self.reads.append(read)
        answered = self.answer(body) if self.answer is not None else None
        if answered is not None:
            return StreamingResponse(self._stream(answered, read), media_type="text/event-stream")
        whole, first = _said(body)
        script = self.scripts.get(whole) or self.scripts.get(first) or self.default
        for key in (whole, first):
            if self.scripts.get(key) is script and key in self.afterwards:
                self.scripts[key] = self.afterwards.pop(key)
        messages = body.get("messages") or [{}]
        if messages[-1].get("role") == "tool":
            # The agent's step after its n-th round of tools since the user spoke.
            rounds = 0
            for message in reversed(messages):
                if message.get("role") == "user":
                    break
                rounds += message.get("role") == "assistant"
            for _ in range(rounds):
                if script.then is None:
                    break
                script = script.then
        if script.status is not None:
            return JSONResponse(
                {"error": {"message": f"scripted failure {script.status}", "type": "fake"}},
                status_code=script.status,
                headers={"retry-after-ms": "1"},
            )
        return StreamingResponse(self._stream(script, read), media_type="text/event-stream")

    async def _stream(self, script: Script, read: Read | None = None) -> AsyncIterator[bytes]:
        if script.first_delay:
            await asyncio.sleep(script.first_delay)
        await hold_before(script, 0)
        yield chunk({"role": "assistant", "content": ""})
        for n, text in enumerate(script.chunks):
            await hold_before(script, n)
            if script.disconnect_after is not None and n >= script.disconnect_after:
                raise _Dropped
            if script.error_after is not None and n >= script.error_after:
                error = {"error": {"message": "The server had an error", "type": "server_error"}}
                yield b"data: " + json.dumps(error).encode() + b"\n\n"
                return
            if script.delay and n:
                await asyncio.sleep(script.delay)
            yield chunk({"content": text})
        await hold_before(script, len(script.chunks))
        for index, (name, arguments) in enumerate(script.tool_calls):
            half = len(arguments) // 2
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": f"call_{index}",
                            "type": "function",
                            "function": {"name": name, "arguments": arguments[:half]},
                        }
                    ]
                }
            )
            yield chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}
            )
        if script.finish:
            yield chunk({}, "tool_calls" if script.tool_calls else "stop")
            usage: dict[str, Any] = {
                "prompt_tokens": 3,
                "completion_tokens": len(script.chunks),
                "total_tokens": 9,
            }
            if read is not None:
                usage["prompt_tokens"] = read.input_tokens
                usage["total_tokens"] = read.input_tokens + len(script.chunks)
                usage["prompt_tokens_details"] = {"cached_tokens": read.cached_tokens}
            yield chunk({}, usage=usage)
        yield b"data: [DONE]\n\n"


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[Any, ...]]:
    """A multipart/form-data body's fields: (value bytes, file name, content type)."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, tuple[Any, ...]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True)
        fields[str(name)] = (data, part.get_filename(), part.get_content_type())
    return fields


def _said(body: dict[str, Any]) -> tuple[str, str]:
    """The last user message's text, and its first paragraph."""
    text = _last_user_text(body)
    return text, text.split("\n\n", 1)[0]


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # text and image parts
                return "".join(p.get("text", "") for p in content if p.get("type") == "text")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def decode(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a request says, in the conformance suite's neutral terms (Chat Completions
    has no error flag on a tool result, so ``is_error`` is ``None``)."""
    functions = [t["function"] for t in body.get("tools") or []]
    items: list[tuple[Any, ...]] = [("tool", f["name"], f["parameters"]) for f in functions]
    names: dict[str, str] = {}
    for message in body.get("messages") or []:
        role, content = message["role"], message.get("content")
        if role == "tool":
            name = names.get(message["tool_call_id"], "?")
            items.append(("result", name, json.loads(content), None))
            continue
        for part in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            if part["type"] == "text" and part["text"]:
                items.append((role, part["text"]))
            elif part["type"] == "image_url":
                head, _, data = part["image_url"]["url"].partition(";base64,")
                items.append(("image", head.removeprefix("data:"), data))
        for call in message.get("tool_calls") or []:
            function = call["function"]
            names[call["id"]] = function["name"]
            items.append(("call", function["name"], json.loads(function["arguments"])))
    return items


class ServerThread:
    """Serves an ASGI app on a loopback port from a background thread."""

    def __init__(self, app: Any, port: int = 0) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        return int(self._server.servers[0].sockets[0].getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible fake for benchmarks.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=50, help="tokens per reply")
    parser.add_argument("--rate", type=float, default=50.0, help="tokens per second (0: no pacing)")
    args = parser.parse_args()
    delay = 1 / args.rate if args.rate else 0.0
    fake = FakeOpenAI(Script(chunks=[f" tok{n}" for n in range(args.tokens)], delay=delay))
    uvicorn.run(fake.app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
