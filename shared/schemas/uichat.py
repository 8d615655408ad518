"""The body the AI SDK's ``DefaultChatTransport`` posts to ``POST /api/spark/agent/chat``,
and what of it the server takes.

The transport sends the whole conversation as the client holds it. The server's
document is the history, so only three things are read from ``messages``: the newest
user message's text (when the conversation ends with one), and, in the newest assistant
message, the approvals the person answered (``addToolApprovalResponse``) and the outputs
of client tools (``addToolOutput``). Each of those is checked against the call waiting in
the document before anything is done; everything else in the body is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from shared.schemas.api import (
    MAX_TEXT_BYTES,
    ApprovalRequest,
    ConversationId,
    DocumentId,
    ToolCallId,
    ToolResultRequest,
)


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
    tool_call_id: ToolCallId | None = Field(default=None, alias="toolCallId")
    state: str | None = Field(default=None, max_length=64)
    output: Any = None
    error_text: str | None = Field(default=None, alias="errorText", max_length=2000)
    approval: UiApproval | None = None


class UiMessage(_Lenient):
    id: str = Field(max_length=128)
    role: Literal["user", "assistant", "system"]
    parts: list[UiPart] = Field(max_length=500)


class ChatRequest(_Lenient):
    """What the transport posts: the chat's id (our conversation id), its messages as
    the client holds them, why it sends (``submit-message``; ``regenerate-message`` is
    refused: a reply, once written, is kept), and the client's own body fields that
    mean something here."""

    id: ConversationId
    messages: list[UiMessage] = Field(min_length=1, max_length=10_000)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    message_id: str | None = Field(default=None, alias="messageId", max_length=128)
    when_busy: Literal["reject", "queue"] = Field(default="reject", alias="whenBusy")
    document_id: DocumentId | None = Field(default=None, alias="documentId")


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """What a chat request asks of the server, before it is checked against the document."""

    text: str | None
    approvals: tuple[ApprovalRequest, ...] = ()
    outputs: tuple[ToolResultRequest, ...] = ()


class UnreadablePart(ValueError):
    """A part the server cannot take (a file not uploaded first, say): refused, 400."""


def turn(request: ChatRequest) -> ChatTurn:
    """The newest user message's text, or the answers in the newest assistant message.

    Raises:
        UnreadablePart: a file part, an empty or over-long message, or nothing to do.
    """
    last = request.messages[-1]
    if last.role == "user":
        if any(p.type == "file" for p in last.parts):
            raise UnreadablePart(
                "Files are attached through POST /api/spark/agent/messages for now; "
                "send this message's text alone."
            )
        text = "".join(p.text or "" for p in last.parts if p.type == "text")
        if not text.strip():
            raise UnreadablePart("The newest message has no text.")
        if len(text.encode()) > MAX_TEXT_BYTES:
            raise UnreadablePart(f"A message's text must be at most {MAX_TEXT_BYTES:,} bytes.")
        return ChatTurn(text=text)
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
