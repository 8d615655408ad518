"""Erasures on the stack's two ``api`` and two ``tasks`` processes (DESIGN §15): a
dependent erased by a parent, and an erasure one of whose deliveries is killed part-way
while the queue redelivers it; each ends with the orphan scan (``orphans.py``) finding
nothing of the account but the others' copies of what it sent, marked
``author.deleted``. (The deletion record, ``/deletions/{id}``, holds only the id's
hash, which the scan's plain id never matches.)"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.queue.base import SIGNATURE_HEADER, TASK_NAME_HEADER, sign
from shared.schemas.deletions import deletion_id_of
from shared.schemas.tasks import EraseTask
from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e.conftest import Functions, StackUser, wait_for
from tests.e2e.orphans import Found, scan
from tests.e2e.test_family_messages import MESSAGES, Household, as_
from tests.e2e.test_retention import talk
from tools.stack import Stack, free_port, start_function

pytestmark = pytest.mark.emulator

CONFIRM = {"confirm": "delete my account"}


@pytest.fixture
def api(functions: Functions) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=functions.api, timeout=60) as client:
        yield client


def former_copy(uid: str) -> Callable[[Found], bool]:
    """Another member's copy of a conversation the erased account wrote in: kept, with
    each of its messages marked ``author.deleted`` (DESIGN §15)."""

    def expected(found: Found) -> bool:
        document = found.document or {}
        messages = document.get("messages", [])
        theirs = [m for m in messages if (m.get("author") or {}).get("userId") == uid]
        owner = found.path.split("/")[0]
        return (
            owner != uid
            and "/client/conversations/" in found.path
            and bool(theirs)
            and all((m["author"]).get("deleted") is True for m in theirs)
        )

    return expected


def finished(db: firestore.Client, uid: str) -> dict[str, Any] | None:
    record = db.document("deletions", deletion_id_of(uid)).get().to_dict()
    return record if record is not None and record.get("step") == "finished" else None


def test_a_dependent_erased_by_a_parent_leaves_only_the_marked_copies(
    functions: Functions,
    api: httpx.Client,
    emulators: tuple[str, str],
    db: firestore.Client,
    bucket: CloudStorageFileStore,
) -> None:
    home = Household(emulators[1], api)
    mum, kid = home.mum, home.kid
    own = talk(functions.api, kid, "help me with my spelling")
    sent = api.post(MESSAGES, headers=as_(kid), json={"text": "Hi Mum", "targetUserId": mum.uid})
    assert sent.status_code == 201, sent.text
    asyncio.run(bucket.write(f"{kid.uid}/uploads/drawing.png", b"png", "image/png"))
    assert scan(db, bucket, kid.uid), "the scan finds the account before"

    erased = api.request(
        "DELETE",
        f"/api/spark/families/{home.family_id}/members/{kid.uid}/account",
        headers=as_(mum),
        json=CONFIRM,
    )
    assert erased.status_code == 202, erased.text
    record = wait_for(lambda: finished(db, kid.uid), what="the erasure to finish")

    assert record["counts"]["copiesMarked"] >= 1
    assert db.document(kid.uid, "client", "conversations", own).get().exists is False
    assert scan(db, bucket, kid.uid, former_copy(kid.uid)) == []


def erase_call(uid: str, step: int) -> tuple[bytes, dict[str, str]]:
    """An erasure's delivery, signed as the local queue signs it."""
    body = EraseTask(user_id=uid, deletion_id=deletion_id_of(uid), step=step).to_bytes()
    name = f"erase-e2e-{step}-{os.getpid()}"
    at = int(time.time())
    return body, {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(os.environ["SPARK_TASKS_LOCAL_KEY"], body, name, at),
        TASK_NAME_HEADER: name,
    }


def test_an_erasure_killed_part_way_and_redelivered_resumes_and_finishes(
    functions: Functions,
    alice: StackUser,
    db: firestore.Client,
    bucket: CloudStorageFileStore,
) -> None:
    # More than two pages of documents (a page is 200), and some files.
    lessons = db.collection(alice.uid, "client", "lessons")
    for start in range(0, 450, 150):
        batch = db.batch()
        for n in range(start, start + 150):
            batch.set(lessons.document(f"lesson_{n:04d}"), {"id": f"lesson_{n:04d}", "n": n})
        batch.commit()
    for n in range(5):
        asyncio.run(bucket.write(f"{alice.uid}/uploads/f{n}.txt", b"x", "text/plain"))
    talk(functions.api, alice, "one conversation before I go")

    # A tasks process of its own, killed while a delivery of the erasure runs on it.
    logs = Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="spark-e2e-"))
    stack = Stack(logs / "fragile-tasks")
    stack.log_dir.mkdir(parents=True, exist_ok=True)
    env = {**functions.env, "SPARK_TASKS_URL": functions.tasks + "/"}
    fragile = start_function(stack, "tasks", free_port(), env)
    try:
        erased = httpx.request(
            "DELETE",
            f"{functions.api}/api/spark/me",
            headers=as_(alice),
            json=CONFIRM,
            timeout=60,
        )
        assert erased.status_code == 202, erased.text
        # The same step delivered to the fragile process (a redelivery, racing the
        # queue's own), which is killed while it works: whatever it did or did not
        # commit, the record's version decides what happens next.
        body, headers = erase_call(alice.uid, 0)
        answered: list[int] = []

        def deliver() -> None:
            try:
                answer = httpx.post(fragile, content=body, headers=headers, timeout=60)
                answered.append(answer.status_code)
            except httpx.HTTPError:
                answered.append(0)  # killed before it answered

        worker = threading.Thread(target=deliver)
        worker.start()
        wait_for(
            lambda: (
                (db.document("deletions", deletion_id_of(alice.uid)).get().to_dict() or {}).get(
                    "step"
                )
                not in (None, "stopping")
            ),
            what="the erasure to get under way",
        )
        for _, process in stack.processes:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        worker.join()
        # And each step delivered once more, late, to the stack (as the queue might).
        for step in range(3):
            body, headers = erase_call(alice.uid, step)
            late = httpx.post(functions.tasks, content=body, headers=headers, timeout=60)
            assert late.status_code == 200, late.text
    finally:
        stack.stop()

    record = wait_for(lambda: finished(db, alice.uid), what="the erasure to finish")
    counts = record["counts"]
    assert counts["files"] == 5  # each file counted once, however many deliveries
    assert counts["documents"] >= 450
    assert scan(db, bucket, alice.uid) == []
