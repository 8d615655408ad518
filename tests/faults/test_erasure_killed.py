"""A fault: an erasure (DESIGN §15) one of whose deliveries is killed part-way, on a
``tasks`` process of its own, while the queue's own deliveries go on and each step is
delivered once more, late. Whatever the killed delivery did or did not commit, the
deletion record's version decides what happens next: the erasure finishes, each file is
counted once, and the orphan scan finds nothing of the account. (Where the kill lands
is not chosen: the verdict holds wherever it does.)"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import httpx
from google.cloud import firestore

from shared.queue.base import SIGNATURE_HEADER, TASK_NAME_HEADER, sign
from shared.schemas.deletions import deletion_id_of
from shared.schemas.tasks import EraseTask
from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e.conftest import Functions, StackUser, wait_for
from tests.e2e.orphans import scan
from tests.e2e.test_erasure_across_processes import CONFIRM, finished
from tests.e2e.test_family_messages import as_
from tests.e2e.test_retention import talk
from tools.stack import Stack, free_port, start_function


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
    # More than a page of documents (a page is 200), and some files.
    lessons = db.collection(alice.uid, "client", "lessons")
    for start in range(0, 300, 150):
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
                answer = httpx.post(fragile, content=body, headers=headers, timeout=600)
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
            # (A page of deletes on a loaded machine's emulator: the timeout is a safety
            # net only.)
            late = httpx.post(functions.tasks, content=body, headers=headers, timeout=600)
            assert late.status_code == 200, late.text
    finally:
        stack.stop()

    record = wait_for(lambda: finished(db, alice.uid), what="the erasure to finish")
    counts = record["counts"]
    # Each file counted at most once, however many deliveries: a delivery killed after
    # deleting files but before its count was committed leaves them uncounted (seen once:
    # 0 of 5; docs/operations/known-limits.md). The scan below proves they are gone.
    assert counts["files"] <= 5
    assert counts["documents"] >= 300
    assert scan(db, bucket, alice.uid) == []
