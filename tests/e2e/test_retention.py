"""Retention on the emulators (DESIGN §15), on two processes of each function: the
sweep, called as Cloud Scheduler calls the tasks function, deletes a conversation
untouched for ``SPARK_RETENTION_DAYS`` (9,000 in the stack, so that nothing another test
dates back is swept) with its archive, task
sections and files, and keeps a recent one; the orphan scan then finds nothing of the
old one but its tombstone."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from google.cloud import firestore

from shared.queue.base import SIGNATURE_HEADER, TASK_NAME_HEADER, sign
from shared.schemas.tasks import RetentionTask
from shared.store.cloudstorage import CloudStorageFileStore
from shared.voice.speech import cache_path
from tests.e2e.conftest import Functions, StackUser, conversation_doc, read_events
from tests.e2e.orphans import scan, tombstone
from tests.fakes.openai_server import FakeOpenAI

DAYS = 9000


def talk(api_url: str, user: StackUser, text: str) -> str:
    """A conversation of one message and its reply: its id."""
    headers = {"Authorization": f"Bearer {user.token}", "Accept": "text/event-stream"}
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", f"{api_url}/api/spark/agent/messages", json={"text": text}, headers=headers
        ) as response,
    ):
        assert response.status_code == 200
        events = [e for e in read_events(response) if not isinstance(e, str)]
    conversation_id: str = events[0].data["conversationId"]
    return conversation_id


def sweep(tasks_url: str, task: RetentionTask | None = None) -> httpx.Response:
    """Call the tasks function as the scheduler does (its body: ``{"kind": "retention"}``),
    signed as the local queue signs its calls."""
    body = (task or RetentionTask()).to_bytes()
    name, at = f"retention-e2e-{time.time_ns()}", int(time.time())
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(os.environ["SPARK_TASKS_LOCAL_KEY"], body, name, at),
        TASK_NAME_HEADER: name,
    }
    return httpx.post(tasks_url, content=body, headers=headers, timeout=120)


def age(db: firestore.Client, uid: str, conversation_id: str, days: int) -> None:
    """Make the conversation last changed ``days`` ago (the admin access the emulator
    gives; nothing else of it changes)."""
    then = datetime.now(UTC) - timedelta(days=days)
    db.document(uid, "client", "conversations", conversation_id).update({"updatedAt": then})


def kept_of(db: firestore.Client, uid: str, conversation_id: str) -> dict[str, Any]:
    """What hangs off the conversation: its archive segments and task sections."""
    ref = db.document(uid, "client", "conversations", conversation_id)
    sections = db.collection(uid, "client", "tasks").where(
        filter=firestore.FieldFilter("conversationId", "==", conversation_id)
    )
    return {
        "archive": [s.id for s in ref.collection("archive").stream()],
        "tasks": [s.id for s in sections.stream()],
    }


def test_the_sweep_deletes_an_old_conversation_with_all_kept_of_it_and_keeps_a_recent_one(
    functions: Functions,
    fake_openai: FakeOpenAI,
    alice: StackUser,
    db: firestore.Client,
    bucket: CloudStorageFileStore,
) -> None:
    old = talk(functions.api, alice, "an old chat about rivers")
    recent = talk(functions.api, alice, "a recent chat about lakes")
    now = datetime.now(UTC)
    # What a conversation keeps beside its document, written as the functions would.
    ref = db.document(alice.uid, "client", "conversations", old)
    ref.collection("archive").document("000001").set(
        {"conversationId": old, "segment": 1, "messages": [], "createdAt": now}
    )
    db.document(alice.uid, "client", "tasks", f"task_{old}").set(
        {
            "id": f"task_{old}",
            "conversationId": old,
            "toolCallId": "call_1",
            "tool": "plan_lessons",
            "title": "Plan",
            "status": "completed",
            "createdAt": now,
            "updatedAt": now,
        }
    )
    spoken = cache_path(alice.uid, old, "msg_1", "voice")
    asyncio.run(bucket.write(spoken, b"mp3", "audio/mpeg"))
    kept_spoken = cache_path(alice.uid, recent, "msg_1", "voice")
    asyncio.run(bucket.write(kept_spoken, b"mp3", "audio/mpeg"))
    assert kept_of(db, alice.uid, old) == {"archive": ["000001"], "tasks": [f"task_{old}"]}
    # The scan sees what is there: the document, its archive, the section, the audio.
    before = {f.path for f in scan(db, bucket, old)}
    assert {
        f"{alice.uid}/client/conversations/{old}",
        f"{alice.uid}/client/conversations/{old}/archive/000001",
        f"{alice.uid}/client/tasks/task_{old}",
        f"gs://{spoken}",
    } <= before
    age(db, alice.uid, old, DAYS + 1)
    age(db, alice.uid, recent, DAYS - 1)

    answered = sweep(functions.tasks)
    again = sweep(functions.tasks)  # a second delivery (the scheduler retried): harmless

    assert (answered.status_code, again.status_code) == (200, 200), answered.text
    assert conversation_doc(db, alice.uid, old) is None
    assert kept_of(db, alice.uid, old) == {"archive": [], "tasks": []}
    assert asyncio.run(bucket.stat(spoken)) is None
    assert conversation_doc(db, alice.uid, recent) is not None
    assert asyncio.run(bucket.stat(kept_spoken)) is not None
    assert scan(db, bucket, old, tombstone(alice.uid, old)) == []
