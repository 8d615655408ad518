"""The voice routes: a live-audio session started, and a reply read aloud."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from shared.schemas.api import SpeechRequest, VoiceSessionResponse
from shared.schemas.openapi.parts import CONVERSATION as CONVERSATION_ID
from shared.schemas.openapi.parts import Operation, error_responses, json_body, post
from spark_http.conversations import CONVERSATION
from spark_http.edge import Edge, Routed


async def start_voice_session(edge: Edge, request: Request) -> Response:
    """``POST /api/spark/agent/voice/sessions``: a live-audio session's provider
    secret, within the caller's daily allowance."""
    user = await edge.caller(request)
    session = await edge.agent.start_voice_session(user.uid)
    answer = VoiceSessionResponse(
        session_id=session.session_id,
        secret=session.secret,
        expires_at=session.expires_at,
        ends_at=session.ends_at,
        provider="google" if session.provider == "google" else "openai",
        model=session.model,
    )
    # The secret is shown once: no cache may keep it.
    return JSONResponse(
        answer.model_dump(by_alias=True, mode="json"),
        status_code=201,
        headers={"Cache-Control": "no-store"},
    )


async def speech(edge: Edge, request: Request) -> Response:
    """``POST .../conversations/{id}/speech``: a reply read aloud, streamed (and kept,
    so a replay is read from Cloud Storage)."""
    user, body = await edge.read(request, SpeechRequest)
    conversation_id = request.path_params["conversation_id"]
    spoken = await edge.agent.speak(user.uid, conversation_id, body.message_id)
    return StreamingResponse(
        spoken.chunks,
        media_type=spoken.media_type,
        headers={
            "Cache-Control": "private, no-cache",
            "X-Spark-Speech": "cached" if spoken.cached else "made",
        },
    )


_SESSION: Operation = {
    "summary": "Start a live-audio session: a short-lived, single-use provider "
    "secret the browser connects to the provider with (it never sees an API key). "
    "Within SPARK_VOICE_SESSIONS_PER_DAY a day (429 past it, nothing minted); 409 "
    "voice_unavailable without an audio provider (offline).",
    "security": [{"bearer": []}],
    "responses": {
        "201": {"description": "Minted.", "content": json_body(VoiceSessionResponse)},
        **error_responses(401, 405, 409, 429, 500, 502, 503),
    },
}


def _speech() -> Operation:
    spoken = post(
        "Read a reply of Spark AI Agent's aloud: its text, each visual part's description "
        "in its place, streamed as audio (audio/mpeg or audio/wav) and kept, so a replay "
        "costs no provider call. 404 for a message not in the caller's conversation, 400 "
        "for one that is not a reply; 409 voice_unavailable offline.",
        SpeechRequest,
        {
            "200": {
                "description": "The audio, streamed.",
                "content": {
                    "audio/mpeg": {"schema": {"type": "string", "format": "binary"}},
                    "audio/wav": {"schema": {"type": "string", "format": "binary"}},
                },
            }
        },
    )
    spoken["parameters"] = [CONVERSATION_ID]
    spoken["responses"].update(error_responses(502))
    return spoken


ROUTES = (
    Routed("/api/spark/agent/voice/sessions", "POST", start_voice_session, "consume", _SESSION),
    Routed(f"{CONVERSATION}/speech", "POST", speech, "consume", _speech()),
)
