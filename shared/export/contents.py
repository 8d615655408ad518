"""What a person's export holds, member by member, each read from its store only when
the zip reaches it: the conversations and lessons a page of ids at a time, then one by
one; the task sections a page at a time; the files a piece at a time.

Nothing of another person is read: the user's own subtree (``/{uid}/…``), their own
uploads (``{uid}/uploads/``), and of their family only its name and its members' names
and roles.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from shared.attachment_rules import uploads_prefix
from shared.errors import NoFamily, NotFound
from shared.export import conversations
from shared.families.preferences import Preferences
from shared.families.service import Families
from shared.schemas.documents import Controls, Lesson
from shared.store.base import ConversationStore, LessonStore, TaskDocumentStore
from shared.store.feedback import FeedbackStore
from shared.store.files import FileStore

# How many ids (or task sections, or files' details) one listing reads at a time.
PAGE = 100
# The piece of a file held at once while it streams into the zip.
FILE_PIECE = 256 * 1024
_DOCUMENT = 1024 * 1024  # Firestore's largest document

T = TypeVar("T")

README = """\
Your data from Spark AI Agent
=============================

Exported {when} for account {uid}.

conversations/  each conversation of yours: {{id}}.json (every message, the older ones
                moved to its archive merged back in order) and {{id}}.md (to read)
lessons/        each lesson of yours, {{id}}.json: the lesson and its kept versions
tasks/          each task's section, {{id}}.json: its steps, progress and result
settings.json   your settings
feedback.json   your ratings of Spark AI Agent's replies (also on each rated message)
family.json     your family, if you belong to one: its name, your place in it, and
                its members' names and roles; for a dependent, what their parents
                allow (the controls: consents, quiet hours, daily turns)
files/          the files you uploaded (and what Spark AI Agent made of them: a
                photo's cleaned copy, a PDF's text), under the paths your messages name

What is left out, and why
-------------------------

Other people's data. A family's other members' own conversations, lessons, settings,
tasks and uploads are theirs: each member exports their own (a parent may export a
dependent's). Of your family this export holds only what every member sees: its name
and its members' names and roles. Messages in your copies of family conversations are
there as you saw them; files another member sent are in their uploads, not yours.

What the service keeps to run, not about you: the records that enforce limits (run
slots, today's usage), caches (a reply's spoken audio, made again on request), and
the run machinery inside a conversation (its claims and leases).
"""


@dataclass(frozen=True, slots=True)
class Member:
    """One file of the zip: its name, its bytes as they are made, and no fewer bytes
    than it holds (``bound``: the zip uses Zip64 for it only if it may need it)."""

    name: str
    chunks: AsyncIterable[bytes]
    bound: int
    modified: datetime


@dataclass(frozen=True, slots=True)
class Sources:
    """Where an export reads a user's data."""

    conversations: ConversationStore
    lessons: LessonStore
    sections: TaskDocumentStore
    preferences: Preferences
    families: Families
    files: FileStore
    feedback: FeedbackStore


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=1).encode() + b"\n"


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _small(name: str, data: bytes, now: datetime) -> Member:
    return Member(name, _once(data), len(data), now)


async def members(sources: Sources, user_id: str, now: datetime) -> AsyncIterator[Member]:
    """Every member of ``user_id``'s export, in the zip's order, each made as it is
    taken (its reads happen while the zip writes it)."""
    yield _small(
        "README.txt", README.format(when=f"{now:%Y-%m-%d %H:%M} UTC", uid=user_id).encode(), now
    )
    settings = await sources.preferences.of(user_id)
    yield _small("settings.json", _json(settings.model_dump(mode="json", by_alias=True)), now)
    ratings = [r.model_dump(mode="json", by_alias=True) for r in await sources.feedback.of(user_id)]
    yield _small("feedback.json", _json(ratings), now)
    yield _small("family.json", _json(await _family(sources.families, user_id)), now)
    async for member in _conversations(sources.conversations, user_id, now):
        yield member
    async for member in _lessons(sources.lessons, user_id, now):
        yield member
    async for member in _sections(sources.sections, user_id, now):
        yield member
    async for member in _files(sources.files, user_id, now):
        yield member


async def _family(families: Families, user_id: str) -> dict[str, Any]:
    """The user's family as every member sees it: names and roles (no other member's
    id, nor anything of theirs)."""
    try:
        family = await families.current(user_id)
    except NoFamily:
        return {"family": None}
    me = family.member(user_id)
    return {
        "family": {
            "id": family.id,
            "name": family.name,
            "myRole": me.role if me else None,
            "joinedAt": me.joined_at.isoformat() if me else None,
            "members": [
                {"displayName": m.display_name, "role": m.role, "you": m.user_id == user_id}
                for m in family.members
            ],
            # What the parents set for a dependent is about them: theirs to see.
            "controls": _controls(family.controls_of(user_id)),
        }
    }


def _controls(controls: Controls | None) -> dict[str, Any] | None:
    """A dependent's controls as exported: what is allowed, not who set it (a parent's
    id is theirs)."""
    if controls is None:
        return None
    return controls.model_dump(mode="json", by_alias=True, exclude={"updated_by"})


Page = Callable[[str | None], Awaitable[tuple[Sequence[T], str | None]]]
"""One page of a listing after a key (from the first: ``None``), and its last key."""


async def _pages(list_page: Page[T]) -> AsyncIterator[T]:
    """Each item of a listing, read a page at a time."""
    after: str | None = None
    while True:
        page, after = await list_page(after)
        for item in page:
            yield item
        if len(page) < PAGE:
            return


async def _conversations(
    store: ConversationStore, user_id: str, now: datetime
) -> AsyncIterator[Member]:
    async def ids(after: str | None) -> tuple[list[str], str | None]:
        found = await store.listing(user_id, after, PAGE)
        return found, found[-1] if found else None

    async for conversation_id in _pages(ids):
        conversation = await store.get(user_id, conversation_id)
        if conversation is None:
            continue  # deleted since it was listed
        bound, base = conversations.size_bound(conversation), f"conversations/{conversation.id}"
        changed = conversation.updated_at
        yield Member(
            f"{base}.json", conversations.as_json(store, user_id, conversation), bound, changed
        )
        yield Member(
            f"{base}.md", conversations.as_markdown(store, user_id, conversation), bound, changed
        )


async def _lessons(store: LessonStore, user_id: str, now: datetime) -> AsyncIterator[Member]:
    async def ids(after: str | None) -> tuple[list[str], str | None]:
        found = await store.listing(user_id, after, PAGE)
        return found, found[-1] if found else None

    async for lesson_id in _pages(ids):
        lesson = await store.get(user_id, lesson_id)
        if lesson is None:
            continue
        kept = await store.versions(user_id, lesson_id)
        bound = (len(kept) + 1) * 4 * _DOCUMENT
        yield Member(
            f"lessons/{lesson.id}.json", _lesson(store, user_id, lesson), bound, lesson.updated_at
        )


async def _lesson(store: LessonStore, user_id: str, lesson: Lesson) -> AsyncIterator[bytes]:
    """The lesson, then its kept versions newest first, each read when it is written."""
    current = lesson.model_dump(mode="json", by_alias=True, exclude_none=True)
    yield b'{\n "lesson": ' + json.dumps(current, ensure_ascii=False).encode()
    yield b',\n "versions": ['
    first = True
    for kept in await store.versions(user_id, lesson.id):
        version = await store.version(user_id, lesson.id, kept.version)
        if version is None:
            continue  # pushed out since it was listed
        shown = version.model_dump(mode="json", by_alias=True, exclude_none=True)
        yield (b"\n  " if first else b",\n  ") + json.dumps(shown, ensure_ascii=False).encode()
        first = False
    yield b"\n ]\n}\n"


async def _sections(store: TaskDocumentStore, user_id: str, now: datetime) -> AsyncIterator[Member]:
    async def sections(after: str | None) -> tuple[list[Any], str | None]:
        found = await store.listing(user_id, after, PAGE)
        return found, found[-1].id if found else None

    async for section in _pages(sections):
        shown = section.model_dump(mode="json", by_alias=True, exclude_none=True)
        yield _small(f"tasks/{section.id}.json", _json(shown), now)


async def _files(store: FileStore, user_id: str, now: datetime) -> AsyncIterator[Member]:
    prefix = uploads_prefix(user_id)

    async def infos(after: str | None) -> tuple[list[Any], str | None]:
        found = await store.listing(prefix, after, PAGE)
        return found, found[-1].path if found else None

    async for info in _pages(infos):
        name = "files/" + info.path[len(prefix) :]
        yield Member(name, _unless_gone(store.chunks(info.path, FILE_PIECE)), info.size_bytes, now)


async def _unless_gone(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A file's pieces; none if it was deleted since it was listed (the zip is already
    under way: its entry stays, empty, rather than the whole export failing)."""
    try:
        async for piece in chunks:
            yield piece
    except NotFound:
        return
