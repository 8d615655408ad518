"""A Gemini API server of our own, on loopback.

Real HTTP and the real ``streamGenerateContent?alt=sse`` stream: each chunk a
``GenerateContentResponse`` (``candidates[0].content.parts`` with ``text`` or whole
``functionCall`` parts, then ``finishReason`` and ``usageMetadata``), so the real
``google-genai`` client talks to it. It plays the same ``Script`` as the OpenAI fake,
chosen by the last user message's text.

A request carrying audio (an ``inlineData`` part of an ``audio/`` type) is a
transcription: the fake cannot hear, so ``hear(clip, text)`` says what a clip's exact
bytes say, streamed a word a chunk; any other clip is heard as nothing.

Run standalone: ``python -m tests.fakes.gemini_server --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shared.egress.offline_moderator import judged
from tests.fakes.openai_server import Script, _Dropped, hold_before
from tests.fakes.prompt_cache import PromptCache, Read

SIGNATURE = "dGhvdWdodC1zaWduYXR1cmU="

_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def chunk(
    parts: list[dict[str, Any]], finish: str | None = None, usage: dict[str, int] | None = None
) -> bytes:
    """One SSE chunk as the Gemini API sends it (CRLF line ends)."""
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": "fake-model"}
    if usage is not None:
        body["usageMetadata"] = usage
    return b"data: " + json.dumps(body).encode() + b"\r\n\r\n"


def _user_text(content: dict[str, Any]) -> str | None:
    parts = content.get("parts") or []
    texts = [p["text"] for p in parts if "text" in p]
    if not texts and any("functionResponse" in p for p in parts):
        return None
    return "".join(texts)


def last_user_text(body: dict[str, Any]) -> str:
    for content in reversed(body.get("contents") or []):
        if content.get("role", "user") == "user":
            text = _user_text(content)
            if text is not None:
                return text
    return ""


def ends_with_results(body: dict[str, Any]) -> bool:
    contents = body.get("contents") or [{}]
    return any("functionResponse" in p for p in contents[-1].get("parts") or [])


def decode(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a request says, in the conformance suite's neutral terms."""
    items: list[tuple[Any, ...]] = [
        ("tool", d["name"], d["parametersJsonSchema"])
        for tool in body.get("tools") or []
        for d in tool["functionDeclarations"]
    ]
    system = body.get("systemInstruction")
    if system:
        items.append(("system", "".join(p.get("text", "") for p in system["parts"])))
    for content in body.get("contents") or []:
        role = "assistant" if content.get("role") == "model" else "user"
        for part in content.get("parts") or []:
            if part.get("thoughtSignature"):
                items.append(("state", "thoughtSignature"))
            if "text" in part:
                items.append((role, part["text"]))
            elif "inlineData" in part:
                items.append(("image", part["inlineData"]["mimeType"], part["inlineData"]["data"]))
            elif "functionCall" in part:
                call = part["functionCall"]
                items.append(("call", call["name"], call.get("args") or {}))
            elif "functionResponse" in part:
                result = part["functionResponse"]
                response = result["response"]
                is_error = "error" in response
                output = response["error"] if is_error else response["output"]
                items.append(("result", result["name"], output, is_error))
    return items


# Gemini's harm categories, and which of ours each rates (dangerous content: self-harm,
# violence and illicit things together).
_HARMS = {
    "HARM_CATEGORY_HARASSMENT": {"harassment"},
    "HARM_CATEGORY_HATE_SPEECH": {"hate"},
    "HARM_CATEGORY_SEXUALLY_EXPLICIT": {"sexual"},
    "HARM_CATEGORY_DANGEROUS_CONTENT": {"self_harm", "violence", "illicit"},
}


class FakeGemini:
    """The fake server's state and its Starlette app."""

    def __init__(self, default: Script | None = None) -> None:
        self.default = default or Script()
        self.scripts: dict[str, Script] = {}
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        # A prompt cache, when set (``prompt_cache.py``): each request's usage then
        # counts its input and the part of it the implicit cache served (``reads``).
        self.cache: PromptCache | None = None
        self.reads: list[Read] = []
        # Voice: each ephemeral token minted (its request), and each speech request.
        self.tokens: list[dict[str, Any]] = []
        self.speeches: list[dict[str, Any]] = []
        self.heard: dict[str, str] = {}
        # Each moderator's request for safety ratings (``generateContent``).
        self.ratings: list[dict[str, Any]] = []
        self.app = Starlette(
            routes=[
                Route("/{version}/auth_tokens", self._auth_token, methods=["POST"]),
                Route("/{version}/models/{call:path}", self._generate, methods=["POST"]),
            ]
        )

    async def _auth_token(self, request: Request) -> Response:
        """``POST v1alpha/auth_tokens``: an ephemeral token (its ``name`` is the token)."""
        if request.path_params["version"] != "v1alpha":
            return JSONResponse({"error": {"code": 404, "message": "v1alpha only"}}, 404)
        body = await request.json()
        self.tokens.append(body)
        return JSONResponse({"name": f"auth_tokens/fake-{len(self.tokens)}"})

    def _speech(self, body: dict[str, Any]) -> Response:
        """A TTS model's answer: 16-bit PCM (base64) in ``inlineData`` parts."""
        self.speeches.append(body)
        pcm = base64.b64encode(last_user_text(body).encode()[:200] or b"\0\0").decode()

        async def audio() -> AsyncIterator[bytes]:
            part = {"inlineData": {"mimeType": "audio/L16;codec=pcm;rate=24000", "data": pcm}}
            yield chunk([part])
            yield chunk([part], "STOP")

        return StreamingResponse(audio(), media_type="text/event-stream")

    def script(self, trigger: str, script: Script) -> None:
        """Answer with ``script`` whenever the last user message is ``trigger``."""
        self.scripts[trigger] = script

    def requests_for(self, trigger: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if last_user_text(r) == trigger]

    def hear(self, clip: bytes, text: str) -> None:
        """Transcribe exactly these bytes as ``text``."""
        self.heard[hashlib.sha256(clip).hexdigest()] = text

    def _audio(self, body: dict[str, Any]) -> bytes | None:
        for content in body.get("contents") or []:
            for part in content.get("parts") or []:
                inline = part.get("inlineData") or {}
                # The SDK's typed Part sends ``mime_type``; the API takes either name.
                kind = inline.get("mimeType") or inline.get("mime_type") or ""
                if str(kind).startswith("audio/"):
                    # Either base64 alphabet (google-genai sends the URL-safe one).
                    return base64.b64decode(inline["data"], altchars=b"-_")
        return None

    async def _transcript(self, text: str) -> AsyncIterator[bytes]:
        words = text.split(" ") if text else []
        for n, word in enumerate(words):
            yield chunk([{"text": word if n == 0 else " " + word}])
        usage = {"promptTokenCount": 105, "candidatesTokenCount": len(words)}
        yield chunk([{"text": ""}], "STOP", {**usage, "totalTokenCount": 105 + len(words)})

    async def _generate(self, request: Request) -> Response:
        if request.path_params["call"].endswith(":generateContent"):
            return await self._rate(request)
        if not request.path_params["call"].endswith(":streamGenerateContent"):
            return JSONResponse({"error": {"code": 404, "message": "not faked"}}, 404)
        if not request.headers.get("x-goog-api-key"):  # as the API answers one without
            error = {"code": 403, "message": "no API key", "status": "PERMISSION_DENIED"}
            return JSONResponse({"error": error}, 403)
        body = await request.json()
        if "AUDIO" in ((body.get("generationConfig") or {}).get("responseModalities") or []):
            return self._speech(body)
        self.requests.append(body)
        self.paths.append(f"{request.url.path}?{request.url.query}")
        audio = self._audio(body)
        if audio is not None:
            text = self.heard.get(hashlib.sha256(audio).hexdigest(), "")
            return StreamingResponse(self._transcript(text), media_type="text/event-stream")
        read = self.cache.read(body) if self.cache is not None else None
        if read is not None:
            self.reads.append(read)
        script = self.scripts.get(last_user_text(body), self.default)
        if ends_with_results(body) and script.then is not None:
            script = script.then
        if script.status is not None:
            status = _STATUSES.get(script.status, "UNKNOWN")
            error = {"code": script.status, "message": f"scripted failure {script.status}"}
            return JSONResponse(
                {"error": {**error, "status": status}},
                status_code=script.status,
            )
        return StreamingResponse(self._stream(script, read), media_type="text/event-stream")

    async def _rate(self, request: Request) -> Response:
        """``generateContent`` as a moderator asks it (a one-token answer, its safety
        ratings read): the prompt's text rated by the offline word list, as Gemini rates
        it (``promptFeedback.safetyRatings``), and a one-token candidate."""
        body = await request.json()
        self.ratings.append(body)
        text = " ".join(
            part.get("text", "") for content in body["contents"] for part in content["parts"]
        )
        found = set(judged(text).categories)
        ratings = [
            {"category": harm, "probability": "HIGH" if ours & found else "NEGLIGIBLE"}
            for harm, ours in _HARMS.items()
        ]
        candidate = {
            "content": {"role": "model", "parts": [{"text": "O"}]},
            "finishReason": "MAX_TOKENS",
            "safetyRatings": ratings,
        }
        usage = {"promptTokenCount": 12, "candidatesTokenCount": 1, "totalTokenCount": 13}
        return JSONResponse(
            {
                "candidates": [candidate],
                "promptFeedback": {"safetyRatings": ratings},
                "usageMetadata": usage,
            }
        )

    async def _stream(self, script: Script, read: Read | None = None) -> AsyncIterator[bytes]:
        if script.first_delay:
            await asyncio.sleep(script.first_delay)
        for n, text in enumerate(script.chunks):
            await hold_before(script, n)
            if script.disconnect_after is not None and n >= script.disconnect_after:
                raise _Dropped
            if script.error_after is not None and n >= script.error_after:
                error = {"code": 503, "message": "Overloaded.", "status": "UNAVAILABLE"}
                yield b"data: " + json.dumps({"error": error}).encode() + b"\r\n\r\n"
                return
            if script.delay and n:
                await asyncio.sleep(script.delay)
            yield chunk([{"text": text}])
        await hold_before(script, len(script.chunks))
        calls = []
        for name, arguments in script.tool_calls:
            part: dict[str, Any] = {"functionCall": {"name": name, "args": json.loads(arguments)}}
            if script.thinking:
                part["thoughtSignature"] = SIGNATURE
            calls.append(part)
        if calls:  # Gemini sends whole calls; several may share a chunk
            yield chunk(calls[:1])
            if calls[1:]:
                yield chunk(calls[1:])
        if script.finish:
            prompt = read.input_tokens if read is not None else 3
            usage = {
                "promptTokenCount": prompt,
                "candidatesTokenCount": len(script.chunks),
                "totalTokenCount": prompt + len(script.chunks),
            }
            if read is not None:
                usage["cachedContentTokenCount"] = read.cached_tokens
            yield chunk([{"text": ""}], "STOP", usage)


def main() -> None:
    parser = argparse.ArgumentParser(description="Gemini API fake for local runs.")
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvicorn.run(FakeGemini().app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
