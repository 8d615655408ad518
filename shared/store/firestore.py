"""The stores on Cloud Firestore (the only module that imports it): conversations,
task ledgers and lessons, all on one client per process (``connect``)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore import DELETE_FIELD, ArrayUnion, AsyncClient, Client

from shared.errors import NotFound, StoreError
from shared.schemas.documents import Conversation, Lesson
from shared.schemas.server import TaskLedger
from shared.store.base import LedgerChange, Mutation, RunProbe
from shared.store.limits import check_size
from shared.store.patch import Patch, Sizes, diff

# A mutation that keeps losing the race is given up after this many attempts.
_MAX_ATTEMPTS = 25
# Documents whose latest version this process wrote or read, kept to skip re-reading,
# bounded by their estimated size (a 1 MB document counts as 1 MB).
_CACHE_BYTES = 64 * 1024 * 1024
# How often a quiet listener is checked for having stopped.
_LISTENER_CHECK_SECONDS = 5.0


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
        try:
            snapshot = await self._ref(user_id, conversation_id).get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore read failed: {exc.message}") from exc
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
        check_size(sizes.total)
        try:
            result = await self._ref(user_id, conversation.id).create(document)
        except gexc.AlreadyExists as exc:
            raise StoreError(f"conversation {conversation.id} already exists") from exc
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore write failed: {exc.message}") from exc
        self._remember(
            (user_id, conversation.id), _Version(conversation, sizes, result.update_time)
        )

    async def mutate(self, user_id: str, conversation_id: str, change: Mutation) -> Conversation:
        key = (user_id, conversation_id)
        ref = self._ref(user_id, conversation_id)
        for _ in range(_MAX_ATTEMPTS):
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
                return updated
            sizes = version.sizes.after(patch)
            check_size(sizes.total)
            option = self._client.write_option(last_update_time=version.update_time)
            try:
                result = await ref.update(_fields(patch), option=option)
            except (gexc.FailedPrecondition, gexc.NotFound):
                self._forget(key)  # someone else wrote: read again and redo
                continue
            except gexc.GoogleAPICallError as exc:
                self._forget(key)
                raise StoreError(f"Firestore write failed: {exc.message}") from exc
            self._remember(key, _Version(updated, sizes, result.update_time))
            return updated
        raise StoreError("The conversation is changing too fast to save; please try again.")

    async def probe(self, user_id: str, conversation_id: str) -> RunProbe:
        key = (user_id, conversation_id)
        try:
            snapshot = await self._ref(user_id, conversation_id).get(
                field_paths=["activeRun.runId", "activeRun.status"]
            )
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore read failed: {exc.message}") from exc
        if not snapshot.exists:
            raise NotFound("No conversation with this id.")
        known = self._versions.get(key)
        if known is not None and known.update_time != snapshot.update_time:
            self._forget(key)  # someone else wrote: the next mutation must read afresh
        run = (snapshot.to_dict() or {}).get("activeRun") or {}
        return RunProbe(run.get("runId"), run.get("status"))

    async def watch(
        self, user_id: str, conversation_id: str
    ) -> AsyncGenerator[Conversation | None, None]:
        # The async client cannot listen; the sync client's listener runs on its own
        # thread and hands each snapshot to this loop, keeping only the latest.
        if self._listener is None:
            if self._listener_factory is None:
                raise StoreError("This store was made without a listener client.")
            self._listener = self._listener_factory()
        loop = asyncio.get_running_loop()
        latest: list[Any] = []
        arrived = asyncio.Event()

        def deliver(snapshot: Any) -> None:
            latest[:] = [snapshot]
            arrived.set()

        def on_snapshot(snapshots: list[Any], changes: Any, read_time: Any) -> None:
            # A document listener gets an empty list when the document does not exist.
            loop.call_soon_threadsafe(deliver, snapshots[-1] if snapshots else None)

        ref = _conversation(self._listener, user_id, conversation_id)
        try:
            watch = ref.on_snapshot(on_snapshot)
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore listen failed: {exc.message}") from exc
        try:
            while True:
                try:
                    await asyncio.wait_for(arrived.wait(), _LISTENER_CHECK_SECONDS)
                except TimeoutError:
                    # The listener closes itself on an error it cannot recover from.
                    if getattr(watch, "_closed", False):
                        raise StoreError("The Firestore listener stopped.") from None
                    continue
                arrived.clear()
                snapshot = latest.pop()
                if snapshot is None or not snapshot.exists:
                    yield None
                    continue
                yield Conversation.model_validate(snapshot.to_dict())
        finally:
            await asyncio.to_thread(watch.unsubscribe)

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


def connect(project_id: str) -> FirestoreStores:
    """The stores on the project's default database (the emulator if its variable is set)."""
    client = AsyncClient(project=project_id)
    return FirestoreStores(
        client,
        FirestoreConversationStore(client, lambda: Client(project=project_id)),
        FirestoreTaskLedgerStore(client),
        FirestoreLessonStore(client),
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

    Ledger changes are few (a handful per task), so each one reads afresh.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _ref(self, user_id: str) -> Any:
        return self._client.collection(user_id).document("server")

    async def get(self, user_id: str) -> TaskLedger:
        try:
            snapshot = await self._ref(user_id).get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore read failed: {exc.message}") from exc
        return TaskLedger.model_validate(snapshot.to_dict()) if snapshot.exists else TaskLedger()

    async def mutate(self, user_id: str, change: LedgerChange) -> TaskLedger:
        ref = self._ref(user_id)
        for _ in range(_MAX_ATTEMPTS):
            try:
                snapshot = await ref.get()
                if not snapshot.exists:
                    updated = change(TaskLedger())
                    await ref.create(updated.to_firestore())
                    return updated
                before = snapshot.to_dict()
                updated = change(TaskLedger.model_validate(before))
                fields = _changed_fields(before, updated.to_firestore())
                if fields:
                    option = self._client.write_option(last_update_time=snapshot.update_time)
                    await ref.update(fields, option=option)
                return updated
            except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound):
                continue  # someone else wrote in between: read again and redo
            except gexc.GoogleAPICallError as exc:
                raise StoreError(f"Firestore write failed: {exc.message}") from exc
        raise StoreError("The task list is changing too fast to save; please try again.")


class FirestoreLessonStore:
    """Lessons at ``/{userId}/client/lessons/{lessonId}`` (clients read them)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _ref(self, user_id: str, lesson_id: str) -> Any:
        return (
            self._client.collection(user_id)
            .document("client")
            .collection("lessons")
            .document(lesson_id)
        )

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        try:
            snapshot = await self._ref(user_id, lesson_id).get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore read failed: {exc.message}") from exc
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
            raise StoreError(f"Firestore write failed: {exc.message}") from exc
        return lesson


def _changed_fields(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The top-level fields to send: new or changed values, and deletions."""
    fields: dict[str, Any] = {k: v for k, v in after.items() if before.get(k, _MISSING) != v}
    fields.update({k: DELETE_FIELD for k in before.keys() - after.keys()})
    return fields


_MISSING = object()
