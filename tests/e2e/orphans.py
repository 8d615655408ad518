"""The orphan scan: every document in the Firestore emulator (every collection, at any
depth: so every collection group) and every object in the Storage emulator's bucket,
searched for an id (a deleted conversation's, or an erased account's).

A document holds the id if a segment of its path is the id, or a value anywhere in it
is the id or a path one of whose segments is (``{uid}/uploads/…``): matched as a
value, never as a substring, since random tokens may contain any short id. What a
test expects to stay (a tombstone, a deletion record, a former member's marked copy)
it names, and everything else found is an orphan.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.cloud import firestore

from shared.store.cloudstorage import CloudStorageFileStore


@dataclass(frozen=True)
class Found:
    """Where the id was found: a document's or an object's path, and in it the field
    (``""``: in the path itself)."""

    path: str
    field: str
    document: dict[str, Any] | None


def documents(db: firestore.Client) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Every document's path and fields (``None``: a path with only subcollections)."""
    pending = list(db.collections())
    while pending:
        collection = pending.pop()
        fields = {s.reference.path: s.to_dict() for s in collection.stream()}
        for ref in collection.list_documents():
            yield ref.path, fields.get(ref.path)
            pending.extend(ref.collections())


def _holds(value: Any, target: str, where: str) -> Iterator[str]:
    if isinstance(value, str):
        if value == target or target in value.split("/"):
            yield where
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key == target:
                yield f"{where}.{key}"
            yield from _holds(inner, target, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _holds(inner, target, f"{where}[{index}]")


def scan(
    db: firestore.Client,
    bucket: CloudStorageFileStore,
    target: str,
    expected: Callable[[Found], bool] = lambda found: False,
) -> list[Found]:
    """Every place ``target`` is found, but those ``expected`` allows."""
    found: list[Found] = []
    for path, fields in documents(db):
        if target in path.split("/"):
            found.append(Found(path, "", fields))
        elif fields is not None:
            found += [Found(path, field, fields) for field in _holds(fields, target, "")]
    for name in asyncio.run(_objects(bucket)):
        if target in name.split("/"):
            found.append(Found(f"gs://{name}", "", None))
    return [f for f in found if not expected(f)]


async def _objects(bucket: CloudStorageFileStore) -> list[str]:
    names: list[str] = []
    after: str | None = None
    while page := await bucket.listing("", after, 500):
        names += [info.path for info in page]
        after = page[-1].path
    return names


def tombstone(user_id: str, conversation_id: str) -> Callable[[Found], bool]:
    """The record a deleted conversation leaves (``DeletedConversation``: no content)."""
    path = f"{user_id}/server/deletedConversations/{conversation_id}"
    return lambda found: found.path == path
