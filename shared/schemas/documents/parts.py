"""A message's parts (text, files, tool calls and results) and what each shows, said in
words: every part but text carries a ``description``."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from shared.schemas.documents.base import Document, Execution, PartType, ToolCallStatus


class FileRef(Document):
    """A file in Cloud Storage under the user's own prefix.

    For an image, ``storage_path`` is the normalised JPEG (no metadata) the server wrote
    beside the upload, ``original_path``; for a PDF it is the upload itself, and
    ``text_path`` the text extracted from it (``text_chars`` long, with page markers).
    A voice clip is the upload itself, ``duration_seconds`` long (as decoded); its
    transcript is the message's text.
    """

    storage_path: str
    content_type: str
    size_bytes: int = Field(ge=0)
    name: str | None = None
    original_path: str | None = None
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    page_count: int | None = Field(default=None, ge=0)
    text_path: str | None = None
    text_chars: int | None = Field(default=None, ge=0)
    duration_seconds: float | None = Field(default=None, ge=0)


class ToolCall(Document):
    """The model asked for a tool to run.

    ``execution`` says who carries it out: the server in the stream (``inline``) or on
    Cloud Tasks (``task``), the user's client (``client``), or the user, answering
    (``question``). ``approval`` marks a call that waited for the owner's approval.
    """

    id: str
    name: str
    args_json: str
    display_text: str
    execution: Execution
    status: ToolCallStatus
    approval: bool | None = None
    # A question a task asked (``ask_user_question``, in a message of its own): the task
    # call it is for. Its answer lets that task go on, in the same section; the agent
    # does not follow it up.
    for_call: str | None = None


class ToolResult(Document):
    """What a tool gave back, fed to the model on the next step."""

    tool_call_id: str
    output_json: str
    status: Literal["ok", "error"]
    hidden: bool | None = None
    # A lesson the tool created or changed, and its version after the change.
    document_id: str | None = None
    document_version: int | None = None


_PAYLOAD_OF: dict[str, str] = {
    "text": "text",
    "image": "file",
    "file": "file",
    "tool_call": "tool_call",
    "tool_result": "tool_result",
}


MAX_DESCRIPTION_CHARS = 600
"""The longest ``description`` of a visual part (a few spoken sentences)."""


_NEEDS_DESCRIPTION: JsonDict = {
    # Every part but text is shown, not read: it says what it shows in words too.
    "if": {"properties": {"type": {"const": "text"}}},
    "else": {"required": ["description"]},
}


def short(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters (with an ellipsis)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _file_description(kind: str, file: FileRef) -> str:
    name = f"“{file.name}”" if file.name else "a file"
    if kind == "image":
        return f"An image: {name}."
    if file.page_count:
        pages = "page" if file.page_count == 1 else "pages"
        return f"A PDF, {name}, of {file.page_count} {pages}."
    if file.content_type.startswith("audio/"):
        return f"A voice recording: {name}."
    return f"A file: {name}."


def _question_description(call: ToolCall) -> str:
    """An ``ask_user_question`` call as it is heard: each question and its options."""
    try:
        questions = json.loads(call.args_json or "{}").get("questions") or []
    except (ValueError, AttributeError):
        questions = []
    said = []
    for question in questions if isinstance(questions, list) else []:
        if not isinstance(question, dict):
            continue
        options = [
            str(o.get("label") if isinstance(o, dict) else o) for o in question.get("options") or []
        ]
        choice = f" The choices are: {', '.join(options)}." if options else ""
        said.append(f"{str(question.get('question') or '').strip()}{choice}")
    return " ".join(said) or call.display_text


def describe(part: ContentPart) -> str | None:
    """What a part shows, said in words: a description for a part written without one
    (or stored before parts had them), within ``MAX_DESCRIPTION_CHARS`` (it is set
    without validation: a longer one, from a long display text or question, would make
    the stored conversation unreadable). Text needs none."""
    said = _described(part)
    return None if said is None else short(said)


def _described(part: ContentPart) -> str | None:
    if part.file is not None:
        return _file_description(part.type, part.file)
    call = part.tool_call
    if call is not None:
        if call.execution == "question":
            return "Spark AI Agent asks: " + _question_description(call)
        return f"{call.display_text}."
    result = part.tool_result
    if result is not None:
        if result.status == "error":
            return "A step did not work."
        if result.document_id is not None:
            return f"A lesson card, at version {result.document_version or 1}."
        return "A step's result."
    return None


class ContentPart(Document):
    """One ordered part of a message; ``type`` says which payload field is set.

    Every part but text carries a short ``description`` of what it shows (DESIGN §9),
    so a spoken reply can say it in its place: the writer gives one that says what the
    part is about ("A lesson card: …"); a part written without one gets ``describe``'s.
    """

    model_config = ConfigDict(json_schema_extra=_NEEDS_DESCRIPTION)

    type: PartType
    text: str | None = None
    file: FileRef | None = None
    tool_call: ToolCall | None = None
    tool_result: ToolResult | None = None
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)

    @model_validator(mode="after")
    def _payload_matches_type(self) -> ContentPart:
        needed = _PAYLOAD_OF[self.type]
        if getattr(self, needed) is None:
            raise ValueError(f"a {self.type!r} part needs {needed!r}")
        if self.type != "text" and not self.description:
            # Not an assignment: that would validate the whole part again.
            self.__dict__["description"] = describe(self)
        return self

    @classmethod
    def of_text(cls, text: str) -> ContentPart:
        return cls(type="text", text=text)
