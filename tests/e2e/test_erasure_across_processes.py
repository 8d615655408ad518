"""Erasures on the stack's two ``api`` and two ``tasks`` processes (DESIGN §15): a
dependent erased by a parent ends with the orphan scan (``orphans.py``) finding nothing
of the account but the others' copies of what it sent, marked ``author.deleted``
(an erasure killed part-way: ``tests/faults/test_erasure_killed.py``). The deletion
record, ``/deletions/{id}``, holds only the id's hash, which the scan never matches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.schemas.deletions import deletion_id_of
from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e.conftest import Functions, wait_for
from tests.e2e.orphans import Found, scan
from tests.e2e.test_family_messages import MESSAGES, Household, as_
from tests.e2e.test_retention import talk

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
