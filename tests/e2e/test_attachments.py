"""Attachments end to end: files uploaded to the Cloud Storage emulator, referenced in a
message to the real api function, checked by their bytes, normalised beside the upload,
and recorded on the user's message in the Firestore emulator."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Iterator

import httpx
import pytest
from google.cloud import firestore
from PIL import Image

from shared.store.cloudstorage import CloudStorageFileStore, connect
from tests.e2e.conftest import PROJECT, StackUser, auth, conversation_doc, read_events
from tests.samples import has_gps, jpeg_with_gps, png_with_gps

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"


@pytest.fixture(scope="module")
def bucket() -> Iterator[CloudStorageFileStore]:
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if not host:
        pytest.fail("attachments need the Cloud Storage emulator: run them with `make test`")
    store = connect(PROJECT, f"{PROJECT}.appspot.com", host)
    yield store
    store.close()


def upload(
    bucket: CloudStorageFileStore, path: str, data: bytes, content_type: str
) -> dict[str, object]:
    asyncio.run(bucket.write(path, data, content_type))
    return {"storagePath": path, "contentType": content_type, "sizeBytes": len(data)}


def no_conversation(db: firestore.Client, uid: str) -> bool:
    conversations = db.collection(uid).document("client").collection("conversations")
    return list(conversations.limit(1).stream()) == []


def test_attachments_png_reaches_the_message_as_a_clean_jpeg(
    api_url: str, db: firestore.Client, alice: StackUser, bucket: CloudStorageFileStore
) -> None:
    path = f"{alice.uid}/uploads/homework.png"
    ref = upload(bucket, path, png_with_gps(), "image/png")
    with httpx.stream(
        "POST",
        api_url + SEND,
        headers=auth(alice),
        json={"text": "What do you think?", "attachments": [ref]},
        timeout=20,
    ) as response:
        assert response.status_code == 200
        events = [e for e in read_events(response) if not isinstance(e, str)]
    conversation_id = events[0].data["conversationId"]
    doc = conversation_doc(db, alice.uid, conversation_id)
    assert doc is not None
    part = doc["messages"][0]["content"][1]
    assert part["type"] == "image"
    assert part["file"]["storagePath"] == path + ".normalised.jpg"
    assert part["file"]["originalPath"] == path
    jpeg = asyncio.run(bucket.read(path + ".normalised.jpg", 25 * 1024 * 1024))
    assert part["file"]["sizeBytes"] == len(jpeg)
    assert not has_gps(jpeg)
    with Image.open(io.BytesIO(jpeg)) as image:
        assert image.format == "JPEG"


def test_attachments_bad_files_are_clear_4xx_and_change_nothing(
    api_url: str,
    db: firestore.Client,
    alice: StackUser,
    bob: StackUser,
    bucket: CloudStorageFileStore,
) -> None:
    def send(*refs: dict[str, object]) -> httpx.Response:
        body = {"text": "Look", "attachments": list(refs)}
        return httpx.post(api_url + SEND, headers=auth(alice, sse=False), json=body, timeout=20)

    lying = upload(bucket, f"{alice.uid}/uploads/report.pdf", jpeg_with_gps(), "application/pdf")
    response = send(lying)
    assert response.status_code == 415
    assert "'report.pdf'" in response.json()["error"]["message"]
    big = b"%PDF-" + b"0" * (26 * 1024 * 1024)
    huge = upload(bucket, f"{alice.uid}/uploads/huge.pdf", big, "application/pdf")
    response = send(huge)
    assert response.status_code == 413
    assert "'huge.pdf'" in response.json()["error"]["message"]
    theirs = upload(bucket, f"{bob.uid}/uploads/diary.png", png_with_gps(), "image/png")
    assert send(theirs).status_code == 403
    missing = {
        "storagePath": f"{alice.uid}/uploads/nope.png",
        "contentType": "image/png",
        "sizeBytes": 10,
    }
    response = send(missing)
    assert response.status_code == 404
    assert "'nope.png'" in response.json()["error"]["message"]
    assert send(*([missing] * 11)).status_code == 400
    assert no_conversation(db, alice.uid)
    assert asyncio.run(bucket.stat(f"{bob.uid}/uploads/diary.png.normalised.jpg")) is None
