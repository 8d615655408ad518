"""The stores on Cloud Firestore (the only module that imports it): conversations,
task ledgers and lessons, all on one client per process (``connect``)."""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore import DELETE_FIELD, ArrayUnion, AsyncClient, Client
from google.cloud.firestore_v1 import _helpers

from shared.config import DEFAULT_LESSON_VERSIONS_KEPT
from shared.errors import NotFound, StoreError, VersionConflict
from shared.schemas.documents import ArchiveSegment, Conversation, Lesson, LessonVersion
from shared.schemas.server import TaskLedger
from shared.store.base import (
    NO_LESSON,
    KeptVersion,
    LedgerChange,
    Mutation,
    RunProbe,
    RunView,
    changed,
    kept_out,
    next_version,
    reserved,
)
from shared.store.limits import CLOSING_RESERVE, check_size
from shared.store.listeners import Key, Listeners, Listening
from shared.store.patch import Patch, Sizes, diff

UNAVAILABLE = "Spark AI Agent could not reach its storage right now; please try again."
# A mutation that keeps losing the race is given up after this many attempts.
_MAX_ATTEMPTS = 25
# Documents whose latest version this process wrote or read, kept to skip re-reading,
# bounded by their estimated size (a 1 MB document counts as 1 MB).
_CACHE_BYTES = 64 * 1024 * 1024
# Task ledgers whose latest version this process remembers.
_LEDGERS_KEPT = 4096


class _WriteBatcher:
    """Sends the streaming writes of many runs together, as one ``BatchWrite`` RPC.

    Each write keeps its own precondition and its own outcome (``BatchWrite`` is not
    atomic), so one run's conflict never fails another's write. Writes made within
    ``window`` seconds of the first one waiting go together, up to ``limit``. Measured
    on the emulator: a single update costs ~1.5 ms of client CPU (and ~6.8 ms of the
    emulator's), ten batched ~0.3 ms each (and ~1.6 ms); a write waits at most
    ``window`` more, which a reply written every 500 ms does not notice.

    The Python client has no public async ``BatchWrite`` (its ``BulkWriter`` is
    threaded and sync), so this uses the same private helpers its ``update`` uses.
    """

    def __init__(self, client: AsyncClient, window: float = 0.02, limit: int = 100) -> None:
        self._client = client
        self._window = window
        self._limit = limit
        self._pending: list[tuple[Any, asyncio.Future[datetime]]] = []
        self._paths: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def update(self, ref: Any, fields: dict[str, Any], option: Any) -> datetime:
        """Apply ``fields`` to ``ref`` if ``option``'s precondition holds; its update time.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: this write failed
                (``FailedPrecondition`` when someone else wrote first).
        """
        (write,) = _helpers.pbs_for_update(ref._document_path, fields, option)
        if ref._document_path in self._paths:
            self._flush()  # one request may write a document only once
        loop = asyncio.get_running_loop()
        done: asyncio.Future[datetime] = loop.create_future()
        self._pending.append((write, done))
        self._paths.add(ref._document_path)
        if len(self._pending) >= self._limit:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._window, self._flush)
        return await done

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        self._paths = set()
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Any, asyncio.Future[datetime]]]) -> None:
        client = self._client
        try:
            response = await client._firestore_api.batch_write(
                request={"database": client._database_string, "writes": [w for w, _ in batch]},
                metadata=client._rpc_metadata,
            )
        except gexc.GoogleAPICallError as exc:
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        for (_, done), status, result in zip(
            batch, response.status, response.write_results, strict=True
        ):
            if done.done():
                continue
            if status.code == 0:
                done.set_result(result.update_time)
            else:
                done.set_exception(gexc.from_grpc_status(status.code, status.message))  # type: ignore[no-untyped-call]


def _streaming_only(patch: Patch) -> bool:
    """A write that changes the active run's sub-fields only (a streaming write)."""
    return not patch.append and all(path.startswith("activeRun.") for path in patch.paths)


@dataclass(frozen=True, slots=True)
class _Version:
    conversation: Conversation
    sizes: Sizes
    update_time: datetime


class FirestoreConversationStore:
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
        self._versions: OrderedDict[tuple[str, str], _Version] = OrderedDict()
        self._cached_bytes = 0
        self._batcher = _WriteBatcher(client)
        # One listener per watched conversation, shared by all who watch it (resume).
        self.listeners: Listeners[Any, RunView | None] = Listeners(self._listen, _run_view)

    def _ref(self, user_id: str, conversation_id: str) -> Any:
        return _conversation(self._client, user_id, conversation_id)

    def _remember(self, key: tuple[str, str], version: _Version) -> None:
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

    async def _read(self, user_id: str, conversation_id: str) -> _Version | None:
        if reserved(conversation_id):
            return None  # Firestore would refuse the id itself: no such conversation
        try:
            snapshot = await self._ref(user_id, conversation_id).get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore read: {exc.message}") from exc
        if not snapshot.exists:
            self._forget((user_id, conversation_id))
            return None
        document = snapshot.to_dict()
        version = _Version(
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
        try:
            result = await self._ref(user_id, conversation.id).create(document)
        except gexc.AlreadyExists as exc:
            raise StoreError(f"conversation {conversation.id} already exists") from exc
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore write: {exc.message}") from exc
        self._remember(
            (user_id, conversation.id), _Version(conversation, sizes, result.update_time)
        )

    async def mutate(
        self, user_id: str, conversation_id: str, change: Mutation, reserve: int = 0
    ) -> Conversation:
        key = (user_id, conversation_id)
        ref = self._ref(user_id, conversation_id)
        for attempt in range(_MAX_ATTEMPTS):
            if attempt > 1:
                await _back_off(attempt)  # the first retry may be a stale cache, not a race
            cached = self._versions.get(key)
            version = cached or await self._read(user_id, conversation_id)
            if version is None:
                raise NotFound("No conversation with this id.")
            try:
                updated = change(version.conversation)
            except Exception:
                if cached is None:
                    raise
                # The change refused what may be an out-of-date copy (another instance
                # may have ended the run it saw): refuse only what is current.
                self._forget(key)
                continue
            patch = diff(version.conversation, updated)
            if not patch:
                if cached is not None:
                    # "Nothing to do" judged on a remembered copy may be wrong (another
                    # instance may have written since): a decision that skips work is
                    # confirmed on a fresh read. One read; no-op changes are rare.
                    self._forget(key)
                    continue
                return updated
            sizes = version.sizes.after(patch)
            check_size(sizes.total, reserve, version.sizes.total)
            option = self._client.write_option(last_update_time=version.update_time)
            try:
                if _streaming_only(patch):
                    written = await self._batcher.update(ref, _fields(patch), option)
                else:
                    written = (await ref.update(_fields(patch), option=option)).update_time
            except (gexc.FailedPrecondition, gexc.NotFound):
                self._forget(key)  # someone else wrote: read again and redo
                continue
            except gexc.GoogleAPICallError as exc:
                self._forget(key)
                raise StoreError(UNAVAILABLE, detail=f"Firestore write: {exc.message}") from exc
            self._remember(key, _Version(updated, sizes, written))
            return updated
        raise StoreError("The conversation is changing too fast to save; please try again.")

    def size(self, user_id: str, conversation_id: str) -> int | None:
        version = self._versions.get((user_id, conversation_id))
        return None if version is None else version.sizes.total

    def _segment_ref(self, user_id: str, conversation_id: str, segment: int) -> Any:
        return self._ref(user_id, conversation_id).collection("archive").document(f"{segment:06d}")

    async def archive(self, user_id: str, segment: ArchiveSegment) -> None:
        ref = self._segment_ref(user_id, segment.conversation_id, segment.segment)
        try:
            await ref.set(segment.to_firestore())
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore archive: {exc.message}") from exc

    async def segments(self, user_id: str, conversation_id: str) -> list[ArchiveSegment]:
        collection = self._ref(user_id, conversation_id).collection("archive")
        try:
            snapshots = [s async for s in collection.order_by("segment").stream()]
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore read: {exc.message}") from exc
        return [ArchiveSegment.model_validate(s.to_dict()) for s in snapshots]

    async def probe(self, user_id: str, conversation_id: str) -> RunProbe:
        if reserved(conversation_id):
            raise NotFound("No conversation with this id.")
        key = (user_id, conversation_id)
        try:
            snapshot = await self._ref(user_id, conversation_id).get(
                field_paths=["activeRun.runId", "activeRun.status"]
            )
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore read: {exc.message}") from exc
        if not snapshot.exists:
            raise NotFound("No conversation with this id.")
        known = self._versions.get(key)
        if known is not None and known.update_time != snapshot.update_time:
            self._forget(key)  # someone else wrote: the next mutation must read afresh
        run = (snapshot.to_dict() or {}).get("activeRun") or {}
        return RunProbe(run.get("runId"), run.get("status"))

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

        try:
            watch = _conversation(self._listener, *key).on_snapshot(on_snapshot)
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore listen: {exc.message}") from exc

        async def stop() -> None:
            await asyncio.to_thread(watch.unsubscribe)

        # The listener closes itself on an error it cannot recover from.
        return Listening(stop, lambda: bool(getattr(watch, "_closed", False)))

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class FirestoreStores:
    """Every store of one process, sharing one async client (and, once something
    listens, one sync client: the async client has no listeners)."""

    client: AsyncClient
    conversations: FirestoreConversationStore
    ledgers: FirestoreTaskLedgerStore
    lessons: FirestoreLessonStore

    def close(self) -> None:
        self.conversations.close()
        self.client.close()  # type: ignore[no-untyped-call]


def connect(
    project_id: str, lesson_versions_kept: int = DEFAULT_LESSON_VERSIONS_KEPT
) -> FirestoreStores:
    """The stores on the project's default database (the emulator if its variable is set)."""
    client = AsyncClient(project=project_id)
    return FirestoreStores(
        client,
        FirestoreConversationStore(client, lambda: Client(project=project_id)),
        FirestoreTaskLedgerStore(client),
        FirestoreLessonStore(client, lesson_versions_kept),
    )


async def _back_off(attempt: int) -> None:
    """Wait before retrying a lost compare-and-set: a random share ("full jitter") of a
    delay that doubles from 5 ms up to 200 ms, so racing writers spread out."""
    await asyncio.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))


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


def _conversation(client: Any, user_id: str, conversation_id: str) -> Any:
    return (
        client.collection(user_id)
        .document("client")
        .collection("conversations")
        .document(conversation_id)
    )


def _fields(patch: Patch) -> dict[str, Any]:
    fields: dict[str, Any] = dict(patch.put)
    fields.update({k: ArrayUnion(v) for k, v in patch.append.items()})
    fields.update(dict.fromkeys(patch.delete, DELETE_FIELD))
    return fields


class FirestoreTaskLedgerStore:
    """Task ledgers at ``/{userId}/server``, changed by compare-and-set like conversations.

    The version each write produces is remembered (a few thousand small documents at
    most), so taking a run slot on a send costs one RPC, not a read and a write. The
    remembered copy is a hint: a change that writes is checked by its precondition, and
    one that writes nothing is judged again on a fresh read before it is believed.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._known: OrderedDict[str, tuple[dict[str, Any], datetime]] = OrderedDict()

    def _ref(self, user_id: str) -> Any:
        return self._client.collection(user_id).document("server")

    def _remember(self, user_id: str, document: dict[str, Any], update_time: datetime) -> None:
        self._known[user_id] = (document, update_time)
        self._known.move_to_end(user_id)
        while len(self._known) > _LEDGERS_KEPT:
            self._known.popitem(last=False)

    async def get(self, user_id: str) -> TaskLedger:
        try:
            snapshot = await self._ref(user_id).get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore read: {exc.message}") from exc
        return TaskLedger.model_validate(snapshot.to_dict()) if snapshot.exists else TaskLedger()

    async def mutate(self, user_id: str, change: LedgerChange) -> TaskLedger:
        ref = self._ref(user_id)
        for attempt in range(_MAX_ATTEMPTS):
            if attempt > 1:
                await _back_off(attempt)
            known = self._known.pop(user_id, None)
            remembered = known is not None
            try:
                if known is None:
                    snapshot = await ref.get()
                    if not snapshot.exists:
                        updated = change(TaskLedger())
                        document = updated.to_firestore()
                        result = await ref.create(document)
                        self._remember(user_id, document, result.update_time)
                        return updated
                    known = (snapshot.to_dict(), snapshot.update_time)
                before, update_time = known
                try:
                    updated = change(TaskLedger.model_validate(before))
                except Exception:
                    if remembered:
                        continue  # judged on a remembered copy: read afresh and judge again
                    raise
                document = updated.to_firestore()
                fields = _changed_fields(before, document)
                if not fields and remembered:
                    # A change that writes nothing (a claim found ``stale``, a finish of
                    # a superseded attempt) decided on a remembered copy: another
                    # process may have granted the attempt since. Its verdict drops
                    # work, so it stands only once a fresh read agrees.
                    continue
                if fields:
                    option = self._client.write_option(last_update_time=update_time)
                    update_time = (await ref.update(fields, option=option)).update_time
                self._remember(user_id, document, update_time)
                return updated
            except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound):
                continue  # someone else wrote in between: read again and redo
            except gexc.GoogleAPICallError as exc:
                raise StoreError(UNAVAILABLE, detail=f"Firestore write: {exc.message}") from exc
        raise StoreError("The task list is changing too fast to save; please try again.")


class FirestoreLessonStore:
    """Lessons at ``/{userId}/client/lessons/{lessonId}`` (clients read them), and their
    kept versions at ``.../versions/{version:06d}`` (clients read those too).

    A change is one batch: the lesson's update, with the precondition that it is still
    the version read, the version it replaces, and the deletion of the version that one
    pushes out. A batch is atomic, so a version is kept exactly when it is replaced.
    """

    def __init__(
        self, client: AsyncClient, versions_kept: int = DEFAULT_LESSON_VERSIONS_KEPT
    ) -> None:
        self._client = client
        self._kept = versions_kept

    def _ref(self, user_id: str, lesson_id: str) -> Any:
        return (
            self._client.collection(user_id)
            .document("client")
            .collection("lessons")
            .document(lesson_id)
        )

    def _versions(self, user_id: str, lesson_id: str) -> Any:
        return self._ref(user_id, lesson_id).collection("versions")

    def _keep(self, batch: Any, user_id: str, lesson: Lesson) -> None:
        """Add keeping ``lesson`` (and dropping the version it pushes out) to ``batch``."""
        versions = self._versions(user_id, lesson.id)
        batch.set(
            versions.document(f"{lesson.version:06d}"), LessonVersion.of(lesson).to_firestore()
        )
        out = kept_out(lesson.version, self._kept)
        if out is not None:
            batch.delete(versions.document(f"{out:06d}"))

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        if reserved(lesson_id):
            return None
        try:
            snapshot = await self._ref(user_id, lesson_id).get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore read: {exc.message}") from exc
        return Lesson.model_validate(snapshot.to_dict()) if snapshot.exists else None

    async def create(self, user_id: str, lesson: Lesson) -> Lesson:
        try:
            await self._ref(user_id, lesson.id).create(lesson.to_firestore())
        except gexc.AlreadyExists:
            existing = await self.get(user_id, lesson.id)
            if existing is not None:
                return existing
            raise StoreError("The lesson vanished while it was being saved.") from None
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore write: {exc.message}") from exc
        return lesson

    async def replace(self, user_id: str, lesson: Lesson, expected_version: int) -> Lesson:
        next_version(lesson, expected_version)
        ref = self._ref(user_id, lesson.id)
        try:
            snapshot = await ref.get()
            if not snapshot.exists:
                raise NotFound(NO_LESSON)
            before = snapshot.to_dict() or {}
            current = Lesson.model_validate(before)
            if current.version != expected_version:
                raise VersionConflict(changed(expected_version, current.version), current.version)
            batch = self._client.batch()
            # The version read above is the one overwritten (and kept), or nothing is.
            option = self._client.write_option(last_update_time=snapshot.update_time)
            batch.update(ref, _changed_fields(before, lesson.to_firestore()), option=option)
            self._keep(batch, user_id, current)
            await batch.commit()
        except (gexc.FailedPrecondition, gexc.NotFound):
            now = await self.get(user_id, lesson.id)
            if now is None:
                raise NotFound(NO_LESSON) from None
            raise VersionConflict(changed(expected_version, now.version), now.version) from None
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore write: {exc.message}") from exc
        return lesson

    async def delete(self, user_id: str, lesson_id: str) -> bool:
        if reserved(lesson_id):
            return False
        ref = self._ref(user_id, lesson_id)
        try:
            snapshot = await ref.get()
            if not snapshot.exists:
                return False
            batch = self._client.batch()
            option = self._client.write_option(last_update_time=snapshot.update_time)
            batch.delete(ref, option=option)
            self._keep(batch, user_id, Lesson.model_validate(snapshot.to_dict()))
            await batch.commit()
        except (gexc.FailedPrecondition, gexc.NotFound):
            return False  # deleted (or changed) meanwhile by someone else
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore delete: {exc.message}") from exc
        return True

    async def versions(self, user_id: str, lesson_id: str) -> list[KeptVersion]:
        if reserved(lesson_id):
            return []
        listing = (
            self._versions(user_id, lesson_id)
            .select(["version", "title", "updatedAt", "characters"])
            .order_by("version", direction="DESCENDING")
        )
        try:
            snapshots = [s async for s in listing.stream()]
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore read: {exc.message}") from exc
        found = [s.to_dict() or {} for s in snapshots]
        return [
            KeptVersion(int(d["version"]), str(d["title"]), d["updatedAt"], int(d["characters"]))
            for d in found
        ]

    async def version(self, user_id: str, lesson_id: str, version: int) -> LessonVersion | None:
        if reserved(lesson_id):
            return None
        try:
            snapshot = await self._versions(user_id, lesson_id).document(f"{version:06d}").get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(UNAVAILABLE, detail=f"Firestore read: {exc.message}") from exc
        return LessonVersion.model_validate(snapshot.to_dict()) if snapshot.exists else None


def _changed_fields(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The top-level fields to send: new or changed values, and deletions."""
    fields: dict[str, Any] = {k: v for k, v in after.items() if before.get(k, _MISSING) != v}
    fields.update({k: DELETE_FIELD for k in before.keys() - after.keys()})
    return fields


_MISSING = object()
