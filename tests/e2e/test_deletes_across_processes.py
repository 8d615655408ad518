"""A deletion racing work in flight, on the stack's two ``api`` and two ``tasks``
processes (DESIGN §15, "No zombie writes"): whatever was under way when a conversation
went makes none of it again, and the orphan scan (``orphans.py``) finds nothing of it
but its tombstone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e.conftest import (
    ExtraApi,
    Functions,
    StackUser,
    auth,
    conversation_doc,
    wait_for,
)
from tests.e2e.orphans import Found, scan, tombstone
from tests.e2e.test_people import SEND, post_stream
from tests.e2e.test_tasks import ledger, script_lesson
from tests.fakes.openai_server import FakeOpenAI, Hold, Script

pytestmark = pytest.mark.emulator

CONVERSATIONS = "/api/spark/agent/conversations"


def conversations_of(db: firestore.Client, uid: str) -> list[str]:
    return [s.id for s in db.collection(uid, "client", "conversations").stream()]


def delete(api_url: str, user: StackUser, conversation_id: str) -> httpx.Response:
    return httpx.delete(
        f"{api_url}{CONVERSATIONS}/{conversation_id}", headers=auth(user, sse=False), timeout=60
    )


def nothing_left(
    db: firestore.Client, bucket: CloudStorageFileStore, user: StackUser, conversation_id: str
) -> list[Found]:
    """The orphans of the deleted conversation: none but its tombstone (its tasks'
    records leave the ledger with their sections)."""
    return scan(db, bucket, conversation_id, tombstone(user.uid, conversation_id))


def test_a_delete_while_a_reply_streams_on_the_other_api_is_never_undone(
    functions: Functions,
    second_api: ExtraApi,
    fake_openai: FakeOpenAI,
    alice: StackUser,
    db: firestore.Client,
    bucket: CloudStorageFileStore,
) -> None:
    hold = Hold(at=2)
    text = "tell me about rivers, then be deleted"
    fake_openai.script(text, Script(chunks=["Rivers", " run", " to", " the", " sea."], hold=hold))
    with ThreadPoolExecutor(1) as pool:
        streaming = pool.submit(post_stream, functions.api + SEND, alice, {"text": text})
        try:
            hold.wait_held("the reply to be mid-stream")
            (conversation_id,) = wait_for(lambda: conversations_of(db, alice.uid) or None)

            def streamed() -> dict[str, Any] | None:
                doc = conversation_doc(db, alice.uid, conversation_id) or {}
                message = (doc.get("activeRun") or {}).get("message") or {}
                return doc if message.get("content") else None

            wait_for(streamed, what="the streamed words in the document")
            deleted = delete(second_api.url, alice, conversation_id)
            assert deleted.status_code == 204, deleted.text
        finally:
            hold.release()
        streaming.result(timeout=120)  # the run ends (its writes refused)

    assert conversation_doc(db, alice.uid, conversation_id) is None
    assert delete(functions.api, alice, conversation_id).status_code == 204  # again: 204
    assert nothing_left(db, bucket, alice, conversation_id) == []


def test_a_delete_while_its_task_runs_on_a_tasks_process_is_never_undone(
    functions: Functions,
    fake_openai: FakeOpenAI,
    alice: StackUser,
    db: firestore.Client,
    bucket: CloudStorageFileStore,
) -> None:
    hold = Hold(at=1)
    topic = "estuaries deleted mid-task"
    draft = Script(chunks=["<lesson><h1>Estuaries</h1>", "<p>Tides.</p></lesson>"], hold=hold)
    script_lesson(fake_openai, "plan a lesson on estuaries", topic, draft)
    try:
        events = post_stream(functions.api + SEND, alice, {"text": "plan a lesson on estuaries"})
        conversation_id = events[0].data["conversationId"]
        (task_id,) = [e.data["taskId"] for e in events if e.event == "task_queued"]
        hold.wait_held("the task's draft on a tasks process")
        assert ledger(db, alice.uid)["tasks"][task_id]["status"] == "running"
        deleted = delete(functions.api, alice, conversation_id)
        assert deleted.status_code == 204, deleted.text
    finally:
        hold.release()

    def ended() -> bool:
        """The task ended and its record left the ledger with the conversation."""
        return task_id not in ledger(db, alice.uid).get("tasks", {})

    wait_for(ended, what="the task to end and leave the ledger")
    assert conversation_doc(db, alice.uid, conversation_id) is None
    assert nothing_left(db, bucket, alice, conversation_id) == []
