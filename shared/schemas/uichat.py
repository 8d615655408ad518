"""The body the AI SDK's ``DefaultChatTransport`` posts to ``POST /api/spark/agent/chat``,
and what of it the server takes.

The transport sends the whole conversation as the client holds it. The server's
document is the history, so only these are read from ``messages``: the newest user
message's text and files (when the conversation ends with one), and, in the newest
assistant message, the approvals the person answered (``addToolApprovalResponse``) and
the outputs of client tools (``addToolOutput``). Each answer is checked against the call
waiting in the document before anything is done; everything else in the body is ignored.

A file part (``{type: "file", mediaType, url, filename?}``) is taken only as the bytes
its ``data:`` URL carries (what ``convertFileListToFileUIParts`` makes), judged here by
the rules of an attachment that need no store (its type, its size, its first bytes), so
a file that breaks one is refused before anything is written; the server fetches nothing
from a link. The bytes then go the way of an uploaded file (``Uploads.keep``, then the
message's attachments, ``attachments/service.py``).
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from shared.attachment_rules import (
    ACCEPTED,
    MAX_ATTACHMENTS,
    MAX_BYTES,
    SNIFF_BYTES,
    size_text,
    sniff,
)
from shared.schemas.api import (
    MAX_TEXT_BYTES,
    ApprovalRequest,
    ConversationId,
    DocumentId,
    ToolCallId,
    ToolResultRequest,
)

MAX_MESSAGES = 10_000
"""Messages one chat body may hold (the client's whole conversation)."""
MAX_PARTS = 500
"""Parts one message may have."""
MAX_BODY_PARTS = 20_000
"""Parts all the messages of one chat body may have together."""


class _Lenient(BaseModel):
    """The transport's shapes: fields the AI SDK adds (metadata, provider state) are
    ignored, not refused, since the client library writes them, not the person."""

    model_config = ConfigDict(extra="ignore")


class UiApproval(_Lenient):
    id: str = Field(min_length=1, max_length=128)
    approved: StrictBool | None = None
    reason: str | None = Field(default=None, max_length=500)


class UiPart(_Lenient):
    type: str = Field(min_length=1, max_length=128)
    text: str | None = None
    url: str | None = None
    media_type: str | None = Field(default=None, alias="mediaType", max_length=255)
    filename: str | None = Field(default=None, max_length=1000)
    tool_call_id: ToolCallId | None = Field(default=None, alias="toolCallId")
    state: str | None = Field(default=None, max_length=64)
    output: Any = None
    error_text: str | None = Field(default=None, alias="errorText", max_length=2000)
    approval: UiApproval | None = None


class UiMessage(_Lenient):
    id: str = Field(max_length=128)
    role: Literal["user", "assistant", "system"]
    parts: list[UiPart] = Field(max_length=MAX_PARTS)


class ChatRequest(_Lenient):
    """What the transport posts: the chat's id (our conversation id), its messages as
    the client holds them, why it sends (``submit-message``; ``regenerate-message``:
    the last reply, ``messageId``, made again), and the client's own body fields that
    mean something here."""

    id: ConversationId
    messages: list[UiMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    message_id: str | None = Field(default=None, alias="messageId", max_length=128)
    when_busy: Literal["reject", "queue"] = Field(default="reject", alias="whenBusy")
    document_id: DocumentId | None = Field(default=None, alias="documentId")


@dataclass(frozen=True, slots=True)
class ChatFile:
    """A file of the newest user message: its name, its type (judged by its first bytes
    too) and its bytes."""

    name: str
    media_type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """What a chat request asks of the server, before it is checked against the document."""

    text: str | None
    approvals: tuple[ApprovalRequest, ...] = ()
    outputs: tuple[ToolResultRequest, ...] = ()
    files: tuple[ChatFile, ...] = ()


class UnreadablePart(ValueError):
    """A part the server cannot take (an empty message, a link to a file): refused, 400."""


class FileTooLarge(UnreadablePart):
    """A file over the attachments' size bound: refused, 413."""


class FileNotTaken(UnreadablePart):
    """A file of a type an attachment may not be (or whose bytes are another): 415."""


# A data: URL's base64 of MAX_BYTES, and its padding: longer cannot be within the bound.
_MAX_BASE64 = (MAX_BYTES + 2) // 3 * 4


# A slice of base64 decoded at a time: a whole number of 4-character groups.
_SLICE = 256 * 1024


def _decoded(url: str, start: int) -> bytes:
    """The base64 from ``start`` of ``url``, decoded a slice at a time into one buffer,
    whose bytes are handed on uncopied (``BytesIO.getvalue`` shares them).

    Raises:
        binascii.Error: not valid base64.
    """
    out = io.BytesIO()
    for at in range(start, len(url), _SLICE):
        out.write(base64.b64decode(url[at : at + _SLICE], validate=True))
    return out.getvalue()


def _file(part: UiPart, index: int) -> ChatFile:
    """The file a ``file`` part carries in its ``data:`` URL, judged by the rules of an
    attachment that need no store.

    Raises:
        UnreadablePart: a link (nothing is fetched), or a URL that is not base64 data.
        FileTooLarge: over 25 MB.
        FileNotTaken: not JPEG, PNG or PDF, as said or as its first bytes say.
    """
    name = (part.filename or "").strip() or f"file-{index + 1}"
    label = f"The file {name!r}"
    url = part.url or ""
    scheme = url[: max(url.find(":"), 0)]
    if scheme.lower() != "data":
        raise UnreadablePart(
            f"{label} is a link ({scheme or 'no scheme'}:); Spark AI Agent fetches nothing "
            "from a link. Send the file itself, as a data: URL "
            "(convertFileListToFileUIParts makes one)."
        )
    # Indexes, not partition(): the URL is up to 33 MB, and its payload is read a slice
    # at a time (_decoded), never copied whole.
    comma = url.find(",")
    said, *params = url[len(scheme) + 1 : max(comma, 0)].split(";")
    if comma < 0 or "base64" not in (p.strip().lower() for p in params):
        raise UnreadablePart(f"{label} is not a base64 data: URL.")
    media_type = (part.media_type or said).strip().lower()
    if media_type not in ACCEPTED:
        raise FileNotTaken(
            f"{label} is {media_type!r}; only JPEG, PNG and PDF files can be attached."
        )
    if len(url) - comma - 1 > _MAX_BASE64:
        raise FileTooLarge(
            f"{label} is over {size_text(MAX_BYTES)}; attachments can be at most "
            f"{size_text(MAX_BYTES)}."
        )
    try:
        data = _decoded(url, comma + 1)
    except (binascii.Error, ValueError):
        raise UnreadablePart(f"{label} is not valid base64 in its data: URL.") from None
    if not data:
        raise UnreadablePart(f"{label} is empty.")
    if len(data) > MAX_BYTES:
        raise FileTooLarge(
            f"{label} is {size_text(len(data))} ({len(data):,} bytes); attachments can be "
            f"at most {size_text(MAX_BYTES)}."
        )
    real = sniff(data[:SNIFF_BYTES])
    if real != media_type:
        contents = "not a JPEG, PNG or PDF file" if real is None else real
        raise FileNotTaken(
            f"{label} was sent as {media_type} but its contents are {contents} "
            "(judged by its first bytes); a file's type must match what it is."
        )
    return ChatFile(name, media_type, data)


def turn(request: ChatRequest) -> ChatTurn:
    """The newest user message's text, or the answers in the newest assistant message.

    Raises:
        UnreadablePart: an empty or over-long message, a file that cannot be taken
            (``FileTooLarge``, ``FileNotTaken``), or nothing to do.
    """
    last = request.messages[-1]
    if last.role == "user":
        parts = [p for p in last.parts if p.type == "file"]
        if len(parts) > MAX_ATTACHMENTS:
            raise UnreadablePart(f"A message can carry at most {MAX_ATTACHMENTS} files.")
        files = tuple(_file(p, i) for i, p in enumerate(parts))
        text = "".join(p.text or "" for p in last.parts if p.type == "text")
        if not text.strip():
            raise UnreadablePart("The newest message has no text.")
        if len(text.encode()) > MAX_TEXT_BYTES:
            raise UnreadablePart(f"A message's text must be at most {MAX_TEXT_BYTES:,} bytes.")
        return ChatTurn(text=text, files=files)
    approvals, outputs = [], []
    for part in last.parts:
        call_id = part.tool_call_id
        if call_id is None or not part.type.startswith(("tool-", "dynamic-tool")):
            continue
        if part.state == "approval-responded" and part.approval is not None:
            if part.approval.approved is None:
                raise UnreadablePart(f"The approval of {call_id} says neither yes nor no.")
            approvals.append(
                ApprovalRequest.model_validate(
                    {
                        "toolCallId": call_id,
                        "approved": part.approval.approved,
                        "reason": part.approval.reason,
                    }
                )
            )
        elif part.state in ("output-available", "output-error"):
            ok = part.state == "output-available"
            output = part.output if ok else {"error": part.error_text or "error"}
            outputs.append(
                ToolResultRequest.model_validate(
                    {"toolCallId": call_id, "output": output, "status": "ok" if ok else "error"}
                )
            )
    if not approvals and not outputs:
        raise UnreadablePart("The newest message is neither a user's message nor an answer.")
    return ChatTurn(text=None, approvals=tuple(approvals), outputs=tuple(outputs))
