"""The voice routes: a live-audio session started, and a reply read aloud."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from shared.schemas.api import SpeechRequest, VoiceSessionResponse
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


ROUTES = (
    Routed("/api/spark/agent/voice/sessions", "POST", start_voice_session, app_check="consume"),
    Routed(f"{CONVERSATION}/speech", "POST", speech, app_check="consume"),
)
