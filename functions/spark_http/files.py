"""The file routes: an upload session started, and a file a message carries read."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.errors import RequestError
from shared.schemas.api import UploadRequest, UploadResponse
from shared.schemas.openapi.parts import CONVERSATION as CONVERSATION_ID
from shared.schemas.openapi.parts import Operation, error_responses, operation
from spark_http.conversations import CONVERSATION
from spark_http.edge import Edge, Routed


async def post_upload(edge: Edge, request: Request) -> Response:
    """``POST /api/spark/agent/uploads``: start an upload session for one file under
    the caller's ``{uid}/uploads/``; the client ``PUT``s the bytes to its URL."""
    user, body = await edge.read(request, UploadRequest)
    upload = await edge.agent.start_upload(
        user.uid,
        body.file_name,
        body.content_type,
        body.size_bytes,
        request.headers.get("origin"),
    )
    answer = UploadResponse(
        storage_path=upload.storage_path,
        upload_url=upload.url,
        method="PUT",
        headers={"Content-Type": upload.content_type},
        expires_at=upload.expires_at,
    )
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"), status_code=201)


async def conversation_file(edge: Edge, request: Request) -> Response:
    """``GET .../conversations/{id}/files?path=…``: a file a message in the caller's
    copy of the conversation carries (one another member sent included)."""
    user = await edge.caller(request)
    path = request.query_params.get("path", "")
    if not path:
        raise RequestError("Name the file: ?path=<the storagePath of a message's file>.")
    conversation_id = request.path_params["conversation_id"]
    found = await edge.agent.conversation_file(user.uid, conversation_id, path)
    shown = "inline" if found.content_type.startswith("image/") else "attachment"
    safe = _header_safe(found.name)
    headers = {
        "Content-Disposition": f'{shown}; filename="{safe}"',
        "Cache-Control": "private, max-age=300",
        "X-Content-Type-Options": "nosniff",
    }
    return Response(found.data, media_type=found.content_type, headers=headers)


def _header_safe(name: str) -> str:
    """``name`` as a quoted header value may carry it (printable ASCII, no quote)."""
    return "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in name)


_UPLOAD = operation(
    "Start an upload session for one file (JPEG, PNG or PDF, at most "
    "25 MB) under the caller's {uid}/uploads/; PUT the bytes to uploadUrl, then "
    "attach storagePath to a message.",
    (201, "Session started.", UploadResponse),
    UploadRequest,
    errors=(400, 401, 405, 413, 415, 429, 500, 503),
)
_FILE: Operation = {
    "summary": "A file that a message in the caller's copy of the conversation "
    "carries (a family member's attachment included): its bytes. 404 if no "
    "message there names the path.",
    "security": [{"bearer": []}],
    "parameters": [
        CONVERSATION_ID,
        {
            "name": "path",
            "in": "query",
            "required": True,
            "schema": {"type": "string", "minLength": 1},
            "description": "The storagePath (or textPath) of a message's file.",
        },
    ],
    "responses": {
        "200": {
            "description": "The file.",
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        },
        **error_responses(400, 401, 404, 405, 500, 503),
    },
}

ROUTES = (
    Routed("/api/spark/agent/uploads", "POST", post_upload, operation=_UPLOAD),
    Routed(f"{CONVERSATION}/files", "GET", conversation_file, operation=_FILE),
)
