"""The stores on Cloud Firestore (the only module that imports it): conversations,
task ledgers and lessons."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore import DELETE_FIELD, AsyncClient

from shared.errors import NotFound, StoreError
from shared.schemas.documents import Conversation, Lesson
from shared.schemas.server import TaskLedger
from shared.store.base import LedgerChange, Mutation
from shared.store.limits import check_size

# A mutation that keeps losing the race is given up after this many attempts.
_MAX_ATTEMPTS = 25
# Documents whose latest version this process wrote or read, kept to skip re-reading.
_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class _Version:
    conversation: Conversation
    document: dict[str, Any]
    update_time: datetime


class FirestoreConversationStore:
    """Conversations at ``/{userId}/client/conversations/{conversationId}``.

    Mutations are compare-and-set: the change is applied to the latest version we
    know, written with an ``update_time`` precondition, and retried on a fresh read if
    someone else wrote in between, so a concurrent append is never lost (a plain
    ``ArrayUnion`` would drop equal elements and could not update a message in place).
    The version each write produces is remembered, so a run's throttled writes cost one
    RPC each and send only the fields that changed, instead of a three-RPC transaction.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._versions: OrderedDict[tuple[str, str], _Version] = OrderedDict()

    @classmethod
    def connect(cls, project_id: str) -> FirestoreConversationStore:
        """A store on the project's default database (the emulator if its variable is set)."""
        return cls(AsyncClient(project=project_id))

    def _ref(self, user_id: str, conversation_id: str) -> Any:
        return (
            self._client.collection(user_id)
            .document("client")
            .collection("conversations")
            .document(conversation_id)
        )

    def _remember(self, key: tuple[str, str], version: _Version) -> None:
        self._versions[key] = version
        self._versions.move_to_end(key)
        while len(self._versions) > _CACHE_SIZE:
            self._versions.popitem(last=False)

    async def _read(self, user_id: str, conversation_id: str) -> _Version | None:
        try:
            snapshot = await self._ref(user_id, conversation_id).get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore read failed: {exc.message}") from exc
        if not snapshot.exists:
            self._versions.pop((user_id, conversation_id), None)
            return None
        document = snapshot.to_dict()
        version = _Version(Conversation.model_validate(document), document, snapshot.update_time)
        self._remember((user_id, conversation_id), version)
        return version

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        version = await self._read(user_id, conversation_id)
        return None if version is None else version.conversation

    async def create(self, user_id: str, conversation: Conversation) -> None:
        document = conversation.to_firestore()
        check_size(document)
        try:
            result = await self._ref(user_id, conversation.id).create(document)
        except gexc.AlreadyExists as exc:
            raise StoreError(f"conversation {conversation.id} already exists") from exc
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore write failed: {exc.message}") from exc
        self._remember(
            (user_id, conversation.id), _Version(conversation, document, result.update_time)
        )

    async def mutate(self, user_id: str, conversation_id: str, change: Mutation) -> Conversation:
        key = (user_id, conversation_id)
        ref = self._ref(user_id, conversation_id)
        for _ in range(_MAX_ATTEMPTS):
            version = self._versions.get(key) or await self._read(user_id, conversation_id)
            if version is None:
                raise NotFound("No conversation with this id.")
            updated = change(version.conversation)
            document = updated.to_firestore()
            check_size(document)
            fields = _changed_fields(version.document, document)
            if not fields:
                return updated
            option = self._client.write_option(last_update_time=version.update_time)
            try:
                result = await ref.update(fields, option=option)
            except (gexc.FailedPrecondition, gexc.NotFound):
                self._versions.pop(key, None)  # someone else wrote: read again and redo
                continue
            except gexc.GoogleAPICallError as exc:
                self._versions.pop(key, None)
                raise StoreError(f"Firestore write failed: {exc.message}") from exc
            self._remember(key, _Version(updated, document, result.update_time))
            return updated
        raise StoreError("The conversation is changing too fast to save; please try again.")

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]


class FirestoreTaskLedgerStore:
    """Task ledgers at ``/{userId}/server``, changed by compare-and-set like conversations.

    Ledger changes are few (a handful per task), so each one reads afresh.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    @classmethod
    def connect(cls, project_id: str) -> FirestoreTaskLedgerStore:
        return cls(AsyncClient(project=project_id))

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

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]


class FirestoreLessonStore:
    """Lessons at ``/{userId}/client/lessons/{lessonId}`` (clients read them)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    @classmethod
    def connect(cls, project_id: str) -> FirestoreLessonStore:
        return cls(AsyncClient(project=project_id))

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

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]


def _changed_fields(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The top-level fields to send: new or changed values, and deletions."""
    fields: dict[str, Any] = {k: v for k, v in after.items() if before.get(k, _MISSING) != v}
    fields.update({k: DELETE_FIELD for k in before.keys() - after.keys()})
    return fields


_MISSING = object()
