"""The conversations on Firestore, and the listeners that follow them."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore import DELETE_FIELD, ArrayUnion, AsyncClient, Client
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.errors import ConversationTouched, NotFound, StoreError
from shared.ids import reserved
from shared.schemas.documents import ArchiveSegment, Conversation
from shared.schemas.server import ArchivedFile, DeletedConversation
from shared.store.base import (
    ConversationStore,
    Decision,
    R,
    RunProbe,
    RunView,
    Untouched,
    archived_file_path,
    deleted_path,
    files_named,
)
from shared.store.firestore.batcher import WriteBatcher
from shared.store.firestore.cas import Again, compare_and_set, confirmed, judged
from shared.store.firestore.common import ids_after, unavailable
from shared.store.firestore.raw import (
    Writes,
    create_write,
    delete_write,
    exists_write,
    set_write,
    update_write,
)
from shared.store.limits import CLOSING_RESERVE, check_size
from shared.store.listeners import Key, Listeners, Listening
from shared.store.patch import Patch, Sizes, diff

# Documents whose latest version this process wrote or read, kept to skip re-reading,
# bounded by their estimated size (a 1 MB document counts as 1 MB).
_CACHE_BYTES = 64 * 1024 * 1024
# The most writes one batch may hold.
_BATCH_WRITES = 500


def _streaming_only(patch: Patch) -> bool:
    """A write that changes the active run's sub-fields only (a streaming write)."""
    return not patch.append and all(path.startswith("activeRun.") for path in patch.paths)


@dataclass(frozen=True, slots=True)
class Version:
    """A conversation as this process last wrote or read it, and when it was written."""

    conversation: Conversation
    sizes: Sizes
    update_time: datetime


class FirestoreConversationStore(ConversationStore):
    """Conversations at ``/{userId}/client/conversations/{conversationId}``.

    Mutations are compare-and-set: the change is applied to the latest version we
    know, written with an ``update_time`` precondition, and retried on a fresh read if
    someone else wrote in between, so a concurrent append is never lost. Only what
    changed is sent (``patch.py``): a streaming write sends ``activeRun`` alone, and
    finishing a run appends one message with ``ArrayUnion`` (safe under the
    precondition, and message ids are unique). The version each write produces is
    remembered, so a run's throttled writes cost one RPC each.
    """

    def __init__(self, client: AsyncClient, listener: Callable[[], Client] | None = None) -> None:
        self._client = client
        self._listener_factory = listener
        self._listener: Client | None = None
        self._versions: OrderedDict[tuple[str, str], Version] = OrderedDict()
        self._cached_bytes = 0
        self._writes = Writes(client)
        self._batcher = WriteBatcher(self._writes)
        # One listener per watched conversation, shared by all who watch it (resume).
        self.listeners: Listeners[Any, RunView | None] = Listeners(self._listen, _run_view)

    def _ref(self, user_id: str, conversation_id: str) -> Any:
        return conversation_ref(self._client, user_id, conversation_id)

    @property
    def writes(self) -> Writes:
        """The raw writes (for a write across documents)."""
        return self._writes

    def ref(self, user_id: str, conversation_id: str) -> Any:
        """The conversation's document reference (for a write across documents)."""
        return self._ref(user_id, conversation_id)

    def remembered(self, user_id: str, conversation_id: str) -> Version | None:
        """The version this process last wrote or read, if it still keeps it (a guess:
        writes over it carry its ``update_time`` as their precondition)."""
        return self._versions.get((user_id, conversation_id))

    async def read(self, user_id: str, conversation_id: str) -> Version | None:
        """The stored version, read now (and remembered); ``None`` if there is none."""
        return await self._read(user_id, conversation_id)

    def remember(self, user_id: str, conversation_id: str, version: Version | None) -> None:
        """Keep ``version`` as the latest (one written across documents), or forget the
        one kept (``None``: someone else wrote, read it again)."""
        if version is None:
            self._forget((user_id, conversation_id))
        else:
            self._remember((user_id, conversation_id), version)

    def _remember(self, key: tuple[str, str], version: Version) -> None:
        self._forget(key)
        self._versions[key] = version
        self._cached_bytes += version.sizes.total
        while self._cached_bytes > _CACHE_BYTES and len(self._versions) > 1:
            oldest = next(iter(self._versions))
            self._forget(oldest)

    def _forget(self, key: tuple[str, str]) -> None:
        old = self._versions.pop(key, None)
        if old is not None:
            self._cached_bytes -= old.sizes.total

    async def _read(self, user_id: str, conversation_id: str) -> Version | None:
        if reserved(conversation_id):
            return None  # Firestore would refuse the id itself: no such conversation
        with unavailable("Firestore read"):
            snapshot = await self._ref(user_id, conversation_id).get()
        if not snapshot.exists:
            self._forget((user_id, conversation_id))
            return None
        document = snapshot.to_dict()
        version = Version(
            Conversation.model_validate(document), Sizes.of(document), snapshot.update_time
        )
        self._remember((user_id, conversation_id), version)
        return version

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        version = await self._read(user_id, conversation_id)
        return None if version is None else version.conversation

    async def create(self, user_id: str, conversation: Conversation) -> None:
        document = conversation.to_firestore()
        sizes = Sizes.of(document)
        check_size(sizes.total, CLOSING_RESERVE)
        with unavailable("Firestore write"):
            try:
                path = self._ref(user_id, conversation.id)._document_path
                (written,) = await self._writes.commit([create_write(path, document)])
            except gexc.AlreadyExists as exc:
                raise StoreError(f"conversation {conversation.id} already exists") from exc
        self._remember((user_id, conversation.id), Version(conversation, sizes, written))

    async def apply(
        self, user_id: str, conversation_id: str, change: Decision[R], *, reserve: int = 0
    ) -> tuple[Conversation, R]:
        key = (user_id, conversation_id)
        return await compare_and_set(
            lambda fresh: self._attempt(key, change, reserve),
            too_fast="The conversation is changing too fast to save; please try again.",
            forget=lambda: self._forget(key),
        )

    async def _attempt(
        self, key: tuple[str, str], change: Decision[R], reserve: int
    ) -> tuple[Conversation, R]:
        """One compare-and-set (``cas.compare_and_set``) on the remembered version, or
        on one read now if none is remembered."""
        cached = self._versions.get(key)
        version = cached or await self._read(*key)
        if version is None:
            raise NotFound("No conversation with this id.")
        remembered = cached is not None
        updated, decided = judged(lambda: change(version.conversation), remembered=remembered)
        patch = diff(version.conversation, updated)
        confirmed(bool(patch), remembered=remembered)
        if not patch:
            return updated, decided
        sizes = version.sizes.after(patch)
        check_size(sizes.total, reserve, version.sizes.total)
        written = await self._write(self._ref(*key), patch, version.update_time)
        if written is None:
            raise Again  # someone else wrote: read again and redo
        self._remember(key, Version(updated, sizes, written))
        return updated, decided

    async def _write(self, ref: Any, patch: Patch, last_update_time: datetime) -> datetime | None:
        """Send ``patch`` if the document was last written at ``last_update_time``: the
        time it was written, or ``None`` if someone else wrote first."""
        with unavailable("Firestore write"):
            try:
                if _streaming_only(patch):
                    return await self._batcher.update(ref, write_fields(patch), last_update_time)
                write = update_write(ref._document_path, write_fields(patch), last_update_time)
                (written,) = await self._writes.commit([write])
                return written
            except (gexc.FailedPrecondition, gexc.NotFound):
                return None

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[str]:
        return await ids_after(_conversations(self._client, user_id), after, limit)

    def size(self, user_id: str, conversation_id: str) -> int | None:
        version = self._versions.get((user_id, conversation_id))
        return None if version is None else version.sizes.total

    def _segment_ref(self, user_id: str, conversation_id: str, segment: int) -> Any:
        return self._ref(user_id, conversation_id).collection("archive").document(f"{segment:06d}")

    async def archive(self, user_id: str, segment: ArchiveSegment) -> None:
        # The index entries first (or in the same batch): a lookup that finds the
        # segment in the marker finds its files in the index.
        ref = self._segment_ref(user_id, segment.conversation_id, segment.segment)
        writes = [
            *self._indexing(user_id, segment),
            set_write(ref._document_path, segment.to_firestore()),
        ]
        await self._commit(user_id, segment.conversation_id, writes)

    async def index(self, user_id: str, segment: ArchiveSegment) -> None:
        await self._commit(user_id, segment.conversation_id, self._indexing(user_id, segment))

    def _indexing(self, user_id: str, segment: ArchiveSegment) -> list[Any]:
        """The index entries of the files ``segment`` names: merged, each adding the
        segment's number to its ``segments`` (``ArrayUnion``: no read needed)."""
        cid = segment.conversation_id
        return [
            set_write(
                self._client.document(*archived_file_path(user_id, cid, path))._document_path,
                {"conversationId": cid, "path": path, "segments": ArrayUnion([segment.segment])},
                merge=True,
            )
            for path in files_named(segment.messages)
        ]

    async def _commit(self, user_id: str, conversation_id: str, writes: list[Any]) -> None:
        """``writes`` in batches of Firestore's 500 at most, in order (atomic when they
        fit one batch: a segment's few files always do), each batch on the condition
        that the conversation still exists (``exists_write``, which changes nothing): a
        move under way when the conversation is deleted recreates none of it.

        Raises:
            NotFound: the conversation does not exist (that batch and those after it
                were not written).
        """
        if reserved(conversation_id):
            raise NotFound("No conversation with this id.")
        guard = exists_write(self._ref(user_id, conversation_id)._document_path)
        with unavailable("Firestore archive"):
            for start in range(0, len(writes), _BATCH_WRITES - 1):
                try:
                    await self._writes.commit([guard, *writes[start : start + _BATCH_WRITES - 1]])
                except gexc.NotFound as exc:
                    raise NotFound("No conversation with this id.") from exc

    async def delete(
        self,
        user_id: str,
        conversation_id: str,
        now: datetime,
        *,
        untouched_before: datetime | None = None,
    ) -> list[str]:
        if reserved(conversation_id):
            raise NotFound("No conversation with this id.")
        key = (user_id, conversation_id)
        deleted = await compare_and_set(
            lambda fresh: self._delete_read(key, now, untouched_before),
            too_fast="The conversation is changing too fast to delete; please try again.",
            tried="Firestore delete",
            forget=lambda: self._forget(key),
        )
        self._forget(key)
        ref = self._ref(*key)
        named = files_named(deleted.messages) if deleted is not None else []
        with unavailable("Firestore delete"):
            archive = [s async for s in ref.collection("archive").stream()]
            for snapshot in archive:
                segment = ArchiveSegment.model_validate(snapshot.to_dict())
                named += files_named(segment.messages)
            index = self._client.collection(user_id).document("server").collection("archivedFiles")
            query = index.where(filter=FieldFilter("conversationId", "==", conversation_id))
            entries = [s.reference async for s in query.stream()]
            refs = [s.reference for s in archive] + entries
            for start in range(0, len(refs), _BATCH_WRITES):
                batch = self._client.batch()
                for gone in refs[start : start + _BATCH_WRITES]:
                    batch.delete(gone)
                await batch.commit()
        return list(dict.fromkeys(named))

    async def _delete_read(
        self, key: tuple[str, str], now: datetime, untouched_before: datetime | None
    ) -> Conversation | None:
        """One compare-and-set delete: the version read now, deleted on the condition
        that it is still the latest (so the files it names are all those it held, and,
        with ``untouched_before``, its ``updatedAt`` is the one judged), with its
        tombstone; ``None`` when only the tombstone is there.

        Raises:
            NotFound: neither is there.
            ConversationTouched: the version read was changed at or after
                ``untouched_before`` (``updatedAt`` only grows: a remembered copy that
                says so is never out of date in that direction).
        """
        tombstone = self._client.document(*deleted_path(*key))
        version = await self._read(*key)
        if version is None:
            with unavailable("Firestore read"):
                if not (await tombstone.get()).exists:
                    raise NotFound("No conversation with this id.")
            return None
        if untouched_before is not None and version.conversation.updated_at >= untouched_before:
            raise ConversationTouched("The conversation was changed since.")
        record = DeletedConversation(conversation_id=key[1], deleted_at=now).to_firestore()
        path = self._ref(*key)._document_path
        await self._writes.commit(
            [delete_write(path, version.update_time), set_write(tombstone._document_path, record)]
        )
        return version.conversation

    async def untouched(self, before: datetime, limit: int) -> list[Untouched]:
        # One collection-group query over every user's conversations, served by the
        # single-field index on ``updatedAt`` at collection-group scope (Terraform's
        # ``conversations_by_update``; automatic indexes are per collection only).
        # Only ``updatedAt`` is read: a page costs the same whatever they hold.
        query = (
            self._client.collection_group("conversations")
            .where(filter=FieldFilter("updatedAt", "<", before))
            .order_by("updatedAt")
            .select(["updatedAt"])
            .limit(limit)
        )
        found = []
        with unavailable("Firestore query"):
            async for snapshot in query.stream():
                path = snapshot.reference.path.split("/")
                if len(path) != 4 or path[1:3] != ["client", "conversations"]:
                    continue  # not a conversation document (no other collection has the name)
                found.append(Untouched(path[0], path[3], snapshot.get("updatedAt")))
        return found

    async def segments(self, user_id: str, conversation_id: str) -> list[ArchiveSegment]:
        listing = self._ref(user_id, conversation_id).collection("archive").order_by("segment")
        with unavailable("Firestore read"):
            snapshots = [s async for s in listing.stream()]
        return [ArchiveSegment.model_validate(s.to_dict()) for s in snapshots]

    async def segment(
        self, user_id: str, conversation_id: str, number: int
    ) -> ArchiveSegment | None:
        if reserved(conversation_id):
            return None
        with unavailable("Firestore read"):
            snapshot = await self._segment_ref(user_id, conversation_id, number).get()
        return ArchiveSegment.model_validate(snapshot.to_dict()) if snapshot.exists else None

    async def archived_file(self, user_id: str, conversation_id: str, path: str) -> list[int]:
        ref = self._client.document(*archived_file_path(user_id, conversation_id, path))
        with unavailable("Firestore read"):
            snapshot = await ref.get()
        if not snapshot.exists:
            return []
        return list(ArchivedFile.model_validate(snapshot.to_dict()).segments)

    async def probe(self, user_id: str, conversation_id: str) -> RunProbe:
        if reserved(conversation_id):
            raise NotFound("No conversation with this id.")
        key = (user_id, conversation_id)
        with unavailable("Firestore read"):
            snapshot = await self._ref(user_id, conversation_id).get(
                field_paths=["activeRun.runId", "activeRun.status", "activeRun.leaseExpiresAt"]
            )
        if not snapshot.exists:
            raise NotFound("No conversation with this id.")
        known = self._versions.get(key)
        if known is not None and known.update_time != snapshot.update_time:
            self._forget(key)  # someone else wrote: the next mutation must read afresh
        run = (snapshot.to_dict() or {}).get("activeRun") or {}
        return RunProbe(run.get("runId"), run.get("status"), run.get("leaseExpiresAt"))

    def watch(self, user_id: str, conversation_id: str) -> AsyncGenerator[RunView | None, None]:
        if reserved(conversation_id):
            return _missing()
        return self.listeners.follow((user_id, conversation_id))

    def _listen(self, key: Key, deliver: Callable[[Any], None]) -> Listening:
        # The async client cannot listen; the sync client's listener runs on its own
        # thread and hands each snapshot to this loop (``Listeners`` keeps the latest).
        if self._listener is None:
            if self._listener_factory is None:
                raise StoreError("This store was made without a listener client.")
            self._listener = self._listener_factory()
        loop = asyncio.get_running_loop()

        def on_snapshot(snapshots: list[Any], changes: Any, read_time: Any) -> None:
            # A document listener gets an empty list when the document does not exist.
            loop.call_soon_threadsafe(deliver, snapshots[-1] if snapshots else None)

        with unavailable("Firestore listen"):
            watch = conversation_ref(self._listener, *key).on_snapshot(on_snapshot)

        async def stop() -> None:
            await asyncio.to_thread(watch.unsubscribe)

        # The listener stops on an error it cannot recover from (its stream ends, and
        # the SDK then closes it): ``is_active``, public, is false from the moment its
        # stream stops being read, through the close and after it.
        return Listening(stop, lambda: not watch.is_active)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()  # type: ignore[no-untyped-call]


async def _missing() -> AsyncGenerator[RunView | None, None]:
    yield None


def _field(snapshot: Any, name: str) -> Any:
    """One top-level field of a snapshot (copied by the client), or ``None``."""
    try:
        return snapshot.get(name)
    except KeyError:
        return None


def _run_view(snapshot: Any) -> RunView | None:
    """What a resume reads of a listener's snapshot: ``activeRun`` now, ``messages``
    only if asked for (once a run has ended)."""
    if snapshot is None or not snapshot.exists:
        return None
    return RunView.stored(
        snapshot.id, _field(snapshot, "activeRun"), lambda: _field(snapshot, "messages")
    )


def _conversations(client: Any, user_id: str) -> Any:
    return client.collection(user_id).document("client").collection("conversations")


def conversation_ref(client: Any, user_id: str, conversation_id: str) -> Any:
    """The reference of ``user_id``'s conversation document (for a write beside it)."""
    return _conversations(client, user_id).document(conversation_id)


def write_fields(patch: Patch) -> dict[str, Any]:
    """What an ``update`` sends for ``patch`` (appends as ``ArrayUnion``)."""
    fields: dict[str, Any] = dict(patch.put)
    fields.update({k: ArrayUnion(v) for k, v in patch.append.items()})
    fields.update(dict.fromkeys(patch.delete, DELETE_FIELD))
    return fields
