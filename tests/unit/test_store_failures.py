"""A store that cannot reach Google Cloud says so with the one user-safe message, and
logs what it tried and why (``StoreError.detail``); nothing vendor-shaped escapes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from shared.errors import NotFound, StoreError
from shared.schemas.documents import ArchiveSegment, Conversation, Lesson, Message
from shared.store import cloudstorage
from shared.store.firestore import (
    FirestoreConversationStore,
    FirestoreLessonStore,
    FirestoreTaskLedgerStore,
)
from shared.store.firestore.common import UNAVAILABLE

NOW = datetime(2026, 3, 1, tzinfo=UTC)
# Each call that reaches Firestore fails with this (an outage, as the client raises it).
DOWN = "the service is down"


class Down:
    """A Firestore client (and each reference, query and batch it makes) whose every
    round trip fails as an outage does; building references and batches works."""

    # What the raw writes (``raw.py``) read of the client to build their requests.
    _database_string = "projects/demo/databases/(default)"
    _rpc_metadata = ()
    _document_path = _database_string + "/documents/u1/client/conversations/c1"

    @property
    def _firestore_api(self) -> Any:
        """The generated client, whose channel the raw writes call on (this)."""
        return type("Api", (), {"transport": type("Transport", (), {"grpc_channel": self})})

    def unary_unary(self, *args: Any, **kwargs: Any) -> Callable[..., Awaitable[Any]]:
        """A gRPC method of the channel: every call fails."""

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._fail()

        return call

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name == "on_snapshot":
            return self._fail
        return self._chain

    def _chain(self, *args: Any, **kwargs: Any) -> Down:
        return self

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise gexc.ServiceUnavailable(DOWN)

    def __await__(self) -> Any:
        self._fail()
        yield

    def __aiter__(self) -> Down:
        return self

    async def __anext__(self) -> Any:
        self._fail()


class ReadsOnly(Down):
    """Reads find one conversation; every write fails as an outage does."""

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        document = conversation().to_firestore()
        return type("Snapshot", (), {"exists": True, "update_time": NOW, "to_dict": document.copy})


def conversation() -> Conversation:
    return Conversation(
        id="conv_1", participant_ids=["u"], created_at=NOW, updated_at=NOW, last_message_at=NOW
    )


def lesson(version: int = 1) -> Lesson:
    return Lesson(
        id="les_1", title="Tides", body="<lesson/>", version=version, created_at=NOW, updated_at=NOW
    )


async def watch_first(store: FirestoreConversationStore) -> object:
    return await anext(store.watch("u", "conv_1"))


conversations = FirestoreConversationStore(Down(), Down)  # type: ignore[arg-type]
ledgers = FirestoreTaskLedgerStore(Down())  # type: ignore[arg-type]
lessons = FirestoreLessonStore(Down())  # type: ignore[arg-type]
segment = ArchiveSegment(conversation_id="conv_1", segment=1, messages=[], created_at=NOW)
# A segment naming a file: its index entry is a write.
filed = ArchiveSegment(
    conversation_id="conv_1",
    segment=1,
    messages=[
        Message.model_validate(
            {
                "id": "m1",
                "role": "user",
                "createdAt": NOW,
                "status": "complete",
                "content": [
                    {
                        "type": "file",
                        "file": {
                            "storagePath": "u/a.png",
                            "contentType": "image/png",
                            "sizeBytes": 1,
                        },
                    }
                ],
            }
        )
    ],
    created_at=NOW,
)

CALLS: dict[str, tuple[Callable[[], Awaitable[object]], str]] = {
    "conversation get": (lambda: conversations.get("u", "conv_1"), "Firestore read"),
    "conversation create": (lambda: conversations.create("u", conversation()), "Firestore write"),
    "conversation mutate": (
        lambda: conversations.mutate("u", "conv_1", lambda c: c),
        "Firestore read",
    ),
    "conversation archive": (lambda: conversations.archive("u", segment), "Firestore archive"),
    "conversation segments": (lambda: conversations.segments("u", "conv_1"), "Firestore read"),
    "conversation segment": (lambda: conversations.segment("u", "conv_1", 1), "Firestore read"),
    "conversation index": (lambda: conversations.index("u", filed), "Firestore archive"),
    "conversation archived file": (
        lambda: conversations.archived_file("u", "conv_1", "u/a.png"),
        "Firestore read",
    ),
    "conversation probe": (lambda: conversations.probe("u", "conv_1"), "Firestore read"),
    "conversation watch": (lambda: watch_first(conversations), "Firestore listen"),
    "ledger get": (lambda: ledgers.get("u"), "Firestore read"),
    # The ledger's read is part of its write (one compare-and-set).
    "ledger mutate": (lambda: ledgers.mutate("u", lambda led: led), "Firestore write"),
    "lesson get": (lambda: lessons.get("u", "les_1"), "Firestore read"),
    "lesson create": (lambda: lessons.create("u", lesson()), "Firestore write"),
    "lesson replace": (lambda: lessons.replace("u", lesson(2), 1), "Firestore write"),
    "lesson delete": (lambda: lessons.delete("u", "les_1"), "Firestore delete"),
    "lesson versions": (lambda: lessons.versions("u", "les_1"), "Firestore read"),
    "lesson progress": (lambda: lessons.progress(["u", "v"]), "Firestore read"),
    "lesson refill": (lambda: lessons.refill("u"), "Firestore read"),
    "lesson version": (lambda: lessons.version("u", "les_1", 1), "Firestore read"),
}


@pytest.mark.parametrize("name", CALLS)
async def test_store_failure_on_firestore_is_unavailable_with_what_was_tried(name: str) -> None:
    call, tried = CALLS[name]
    with pytest.raises(StoreError) as failed:
        await call()
    assert failed.value.message == UNAVAILABLE
    assert failed.value.detail == f"{tried}: {DOWN}"
    assert isinstance(failed.value.__cause__, gexc.ServiceUnavailable)


async def test_store_failed_conversation_write_is_unavailable_and_forgets_its_copy() -> None:
    store = FirestoreConversationStore(ReadsOnly())  # type: ignore[arg-type]
    assert await store.get("u", "conv_1") == conversation()
    assert store.size("u", "conv_1") is not None  # remembered
    with pytest.raises(StoreError) as failed:
        await store.mutate("u", "conv_1", lambda c: c.model_copy(update={"title": "T"}))
    assert failed.value.message == UNAVAILABLE
    assert failed.value.detail == f"Firestore write: {DOWN}"
    assert store.size("u", "conv_1") is None  # the next change reads afresh


class Bucket:
    """A Cloud Storage bucket whose every call fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def bucket(self, name: str) -> Bucket:
        return self

    def blob(self, path: str) -> Bucket:
        return self

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    get_blob = download_as_bytes = upload_from_string = create_resumable_upload_session = _fail
    delete = _fail

    def delete_blobs(self, blobs: list[str], on_error: Callable[[str], object]) -> None:
        """As the SDK's batch: a blob not found goes to ``on_error``; anything else fails."""
        if not isinstance(self.error, gexc.NotFound):
            raise self.error
        for blob in blobs:
            on_error(blob)


FILE_CALLS: dict[str, Callable[[cloudstorage.CloudStorageFileStore], Awaitable[object]]] = {
    "head": lambda files: files.head("a.txt", 10),
    "read": lambda files: files.read("a.txt", 10),
    "write": lambda files: files.write("a.txt", b"x", "text/plain"),
    "start_upload": lambda files: files.start_upload("a.txt", "text/plain", 1, None),
    "delete": lambda files: files.delete(["a.txt"]),
}


@pytest.mark.parametrize("name", FILE_CALLS)
async def test_store_failure_on_cloud_storage_is_unavailable_with_the_error(name: str) -> None:
    files = cloudstorage.CloudStorageFileStore(Bucket(gexc.ServiceUnavailable(DOWN)), "b")
    with pytest.raises(StoreError) as failed:
        await FILE_CALLS[name](files)
    assert failed.value.message == cloudstorage.UNAVAILABLE
    assert failed.value.detail == f"503 {DOWN}"
    assert isinstance(failed.value.__cause__, gexc.ServiceUnavailable)


async def test_store_missing_file_is_not_found_but_a_missing_bucket_fails() -> None:
    files = cloudstorage.CloudStorageFileStore(Bucket(gexc.NotFound("no such object")), "b")
    with pytest.raises(NotFound):
        await files.read("a.txt", 10)
    assert await files.stat("a.txt") is None
    assert await files.delete(["a.txt"]) == 0  # gone already: nothing to do
    # Starting an upload into a bucket that is not there is ours to fix, not the user's.
    with pytest.raises(StoreError) as failed:
        await files.start_upload("a.txt", "text/plain", 1, None)
    assert not isinstance(failed.value, NotFound)
    assert failed.value.message == cloudstorage.UNAVAILABLE
