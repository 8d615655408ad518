"""The document tools (seed 004), inline, on the lesson the conversation works on:
``read_document``, ``search_document``, ``edit_document`` and ``get_document_info``.

The text work is in ``shared/lessons/text.py``; here is the store. An edit is applied
to the version just read and written only if that version is still the stored one
(``LessonStore.replace``), so two edits at once never lose one: the later is refused
and told to read again. Every edit must leave a valid lesson with its element ids, and
the version it replaces is kept (the owner can restore it).

An edit is checked before it runs (``Tool.check``): the check pins it to the lesson and
version it read, and one that would remove most of the lesson (``WIPE_SHARE``) waits for
the owner's approval; approved, it is applied to that version or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from shared.clock import Clock
from shared.errors import NotFound, ToolError, VersionConflict
from shared.lessons import text
from shared.lessons.grammar import InvalidLesson, ParsedLesson, renamed_ids, validate
from shared.schemas.documents import Lesson
from shared.store.base import LessonStore
from shared.tools.base import Checked, DocumentChange, Tool, ToolContext, ToolOutput

READ_CHARS = 7_000
"""How much of a lesson one read returns (under the tool output cap, so the model sees
the note telling it where to carry on, not a cut in the middle)."""

WIPE_SHARE = 0.5
"""An edit that would remove more than this share of a lesson's characters, or of its
exercises, waits for the owner's approval. Text the model reads (in the lesson itself, or
in an attached PDF) can steer it, and one edit can replace a whole lesson; the changes
users ask for (a fix, an added exercise, a rewritten section) remove far less in one
call, so asking only past half costs them nothing, and a wipe costs them one click."""

NO_DOCUMENT = (
    "No lesson is open in this conversation. Ask the user to open the lesson they mean, "
    "or create one with create_lesson."
)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadArgs(_Args):
    start_line: int | None = Field(
        default=None, ge=1, description="First line to read (1-based). Omit to start at 1."
    )
    end_line: int | None = Field(
        default=None,
        ge=1,
        description="Last line to read (1-based, inclusive). Omit to read to the end.",
    )


class SearchArgs(_Args):
    query: str = Field(
        min_length=1, max_length=text.MAX_PATTERN_CHARS, description="Text or pattern to find."
    )
    is_regex: bool = Field(default=False, description="Treat query as a regular expression.")
    case_sensitive: bool = Field(default=False, description="Match case exactly.")


class EditArgs(_Args):
    find: str = Field(
        min_length=1,
        max_length=20_000,
        description="The exact text to replace, as read (case, spaces and markup included).",
    )
    replace: str = Field(max_length=50_000, description="The text to put in its place.")
    version: int | None = Field(
        default=None,
        ge=1,
        description="The version you read (from read_document or get_document_info): "
        "the edit is refused if the lesson has changed since.",
    )
    # Pinned by the check (not offered to the model): the lesson the edit was checked
    # against, so an approved edit changes that lesson even if the conversation moved on.
    lesson_id: SkipJsonSchema[str | None] = Field(default=None, max_length=128)


class InfoArgs(_Args):
    pass


async def _lesson(
    lessons: LessonStore, context: ToolContext, lesson_id: str | None = None
) -> Lesson:
    lesson_id = lesson_id or context.document_id
    if lesson_id is None:
        raise ToolError(NO_DOCUMENT)
    lesson = await lessons.get(context.user_id, lesson_id)
    if lesson is None:
        raise ToolError(
            "The lesson open in this conversation no longer exists (it may have been "
            "deleted). Ask the user which lesson to work on."
        )
    return lesson


def _stats(lesson: Lesson) -> text.Stats:
    try:
        words = validate(lesson.body).words()
    except InvalidLesson:  # stored lessons are valid; an old one may not be
        words = len(lesson.body.split())
    return text.Stats(len(text.split_lines(lesson.body)), words, len(lesson.body))


def _exercises(parsed: ParsedLesson | None) -> set[str]:
    return (
        set() if parsed is None else {i for i, (tag, _) in parsed.ids.items() if tag == "exercise"}
    )


@dataclass(frozen=True, slots=True)
class _Edit:
    """An edit worked out on one version of a lesson (nothing stored yet)."""

    body: str
    line: int
    remaining: int
    removed: int  # characters of the lesson the edit removes
    exercises: int  # exercises the lesson had
    exercises_removed: int

    def wipes(self, lesson: Lesson) -> bool:
        return self.removed > WIPE_SHARE * len(lesson.body) or (
            self.exercises_removed > WIPE_SHARE * self.exercises
        )


def _work_out(lesson: Lesson, args: EditArgs) -> _Edit:
    """What ``args`` does to ``lesson``.

    Raises:
        ToolError: it was made against another version, finds nothing, would break the
            lesson or change an element's id.
    """
    if args.version is not None and args.version != lesson.version:
        raise ToolError(
            f"The lesson changed since version {args.version} (it is now version "
            f"{lesson.version}); nothing was changed. Read it again and redo the edit."
        )
    body, line, remaining = text.replace_first(lesson.body, args.find, args.replace)
    try:
        after = validate(body)
    except InvalidLesson as exc:
        raise ToolError(f"The edit was not made: it would break the lesson. {exc}") from None
    try:
        before: ParsedLesson | None = validate(lesson.body)
    except InvalidLesson:  # a lesson stored before the grammar: nothing to keep
        before = None
    renamed = [] if before is None else renamed_ids(before, after)
    if renamed:
        raise ToolError(
            "The edit was not made: element ids must stay as they are ("
            + "; ".join(renamed)
            + "). Keep each id and change only the content."
        )
    had = _exercises(before)
    return _Edit(
        body,
        line,
        remaining,
        text.removed_chars(args.find, args.replace),
        len(had),
        len(had - _exercises(after)),
    )


def _wipe_text(lesson: Lesson, edit: _Edit) -> str:
    """What the owner is asked to approve."""
    share = round(100 * edit.removed / max(len(lesson.body), 1))
    shown = f"Removing most of “{lesson.title}”: {share}% of its text"
    if edit.exercises_removed:
        shown += f" and {edit.exercises_removed} of its {edit.exercises} exercises"
    return shown


def _edited(lesson_id: str, version: int, edit: _Edit) -> ToolOutput:
    note = f"Replaced the first occurrence, at line {edit.line}; the lesson is now version "
    note += f"{version}."
    if edit.remaining:
        note += (
            f" {edit.remaining} more occurrence{'s' if edit.remaining != 1 else ''} left as "
            "they were."
        )
    return ToolOutput(
        {"result": note, "documentId": lesson_id, "version": version},
        DocumentChange(lesson_id, version),
    )


def document_tools(lessons: LessonStore, clock: Clock) -> list[Tool[Any]]:
    """The four document tools over ``lessons``."""

    async def read(args: ReadArgs, context: ToolContext) -> str:
        lesson = await _lesson(lessons, context)
        body, _, _ = text.read_range(lesson.body, args.start_line, args.end_line, READ_CHARS)
        return f"{text.header(lesson.title, _stats(lesson), lesson.version)}\n---\n{body}"

    async def search(args: SearchArgs, context: ToolContext) -> str:
        lesson = await _lesson(lessons, context)
        return text.search(lesson.body, args.query, args.is_regex, args.case_sensitive)

    async def check_edit(args: EditArgs, context: ToolContext) -> Checked[EditArgs]:
        if args.lesson_id is not None and args.lesson_id != context.document_id:
            raise ToolError("edit_document works on the lesson open in this conversation only.")
        lesson = await _lesson(lessons, context)
        edit = _work_out(lesson, args)
        # Pinned: whatever runs (now, or once approved) is this edit of this version.
        pinned = args.model_copy(update={"lesson_id": lesson.id, "version": lesson.version})
        if edit.wipes(lesson):
            return Checked(pinned, approval=True, display_text=_wipe_text(lesson, edit))
        return Checked(pinned)

    async def applied(lesson: Lesson, args: EditArgs, user_id: str) -> _Edit | None:
        """This edit, if it is the change that made ``lesson`` what it is: a call run
        again after it was applied (tasks are delivered at least once) is done, not
        refused for the version it made."""
        if args.version is None or lesson.version != args.version + 1:
            return None
        kept = await lessons.version(user_id, lesson.id, args.version)
        if kept is None:
            return None
        try:
            edit = _work_out(kept.as_lesson(), args)
        except ToolError:
            return None
        return edit if edit.body == lesson.body else None

    async def edit(args: EditArgs, context: ToolContext) -> ToolOutput:
        lesson = await _lesson(lessons, context, args.lesson_id)
        done = await applied(lesson, args, context.user_id)
        if done is not None:
            return _edited(lesson.id, lesson.version, done)
        change = _work_out(lesson, args)
        edited = lesson.model_copy(
            update={"body": change.body, "version": lesson.version + 1, "updated_at": clock.now()}
        )
        try:
            await lessons.replace(context.user_id, edited, lesson.version)
        except VersionConflict as exc:
            raise ToolError(exc.message) from None
        except NotFound:
            raise ToolError("The lesson was deleted meanwhile; nothing was changed.") from None
        return _edited(lesson.id, edited.version, change)

    async def info(args: InfoArgs, context: ToolContext) -> dict[str, object]:
        lesson = await _lesson(lessons, context)
        stats = _stats(lesson)
        return {
            "documentId": lesson.id,
            "title": lesson.title,
            "lines": stats.lines,
            "words": stats.words,
            "characters": stats.characters,
            "version": lesson.version,
        }

    return [
        Tool(
            name="read_document",
            description=(
                "Read the lesson open in this conversation: all of it, or a line range. "
                "Lines are numbered (1-based) after a header with the title, lines, words "
                "and version. Long lessons are cut; read on with start_line."
            ),
            args=ReadArgs,
            display_text="Reading document",
            run=read,
        ),
        Tool(
            name="search_document",
            description=(
                "Find text (or a regular expression) in the lesson, case-insensitive unless "
                "asked. Returns up to 20 matching lines with one line of context before and "
                "after. Use it to find the exact text before editing."
            ),
            args=SearchArgs,
            display_text="Searching document",
            run=search,
        ),
        Tool(
            name="edit_document",
            description=(
                "Change the lesson: replace the first occurrence of the exact text `find` "
                "(case-sensitive) with `replace`. Copy `find` from read_document or "
                "search_document; small, targeted edits work best; call it again for each "
                "change. The lesson must stay valid lesson XML and keep its element ids. "
                "Only edit when the user asked for a change. An edit that removes most of "
                "the lesson waits for the user's approval."
            ),
            args=EditArgs,
            display_text="Editing document",
            run=edit,
            check=check_edit,
        ),
        Tool(
            name="get_document_info",
            description=(
                "Get the open lesson's title, lines, words, characters and version without "
                "reading it."
            ),
            args=InfoArgs,
            display_text="Checking document",
            run=info,
        ),
    ]
