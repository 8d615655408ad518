"""Attachments end to end: files uploaded to the Cloud Storage emulator (through upload
sessions the real api function starts, or written directly), referenced in a message to
the api, checked by their bytes, normalised beside the upload, and recorded on the user's
message in the Firestore emulator."""

from __future__ import annotations

import asyncio
import io
import os
from typing import Any

import httpx
import pytest
from google.cloud import firestore
from PIL import Image

from shared.store.cloudstorage import CloudStorageFileStore
from shared.store.files import FileInfo
from tests.e2e.conftest import StackUser, auth, conversation_doc, read_events, upload
from tests.samples import has_gps, jpeg_with_gps, pdf_with_pages, png_with_gps

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"
UPLOADS = "/api/spark/agent/uploads"
ORIGIN = "http://localhost:5173"


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


def start_upload(
    api_url: str, user: StackUser, name: str, content_type: str, size: int
) -> dict[str, Any]:
    """Ask the api for an upload session, as a browser on ``ORIGIN`` would."""
    response = httpx.post(
        api_url + UPLOADS,
        headers={**auth(user, sse=False), "Origin": ORIGIN},
        json={"fileName": name, "contentType": content_type, "sizeBytes": size},
        timeout=20,
    )
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_attachments_uploaded_through_a_session_reach_the_message(
    api_url: str, db: firestore.Client, alice: StackUser, bucket: CloudStorageFileStore
) -> None:
    png = png_with_gps()
    session = start_upload(api_url, alice, "My homework (1).png", "image/png", len(png))
    path = session["storagePath"]
    assert path.startswith(f"{alice.uid}/uploads/upl_")
    assert path.endswith("/My_homework_1.png")
    assert session["method"] == "PUT"
    assert session["headers"] == {"Content-Type": "image/png"}
    url = session["uploadUrl"]
    assert url.startswith(os.environ["STORAGE_EMULATOR_HOST"] + "/upload/")
    assert asyncio.run(bucket.stat(path)) is None  # nothing until the client uploads

    put = httpx.put(url, content=png, headers=session["headers"], timeout=20)
    assert put.is_success, put.text
    # The file keeps the name its owner gave it (the path has the safe form).
    kept = FileInfo(path, "image/png", len(png), "My homework (1).png")
    assert asyncio.run(bucket.stat(path)) == kept

    ref = {"storagePath": path, "contentType": "image/png", "sizeBytes": len(png)}
    with httpx.stream(
        "POST",
        api_url + SEND,
        headers=auth(alice),
        json={"text": "Here is my homework", "attachments": [ref]},
        timeout=20,
    ) as response:
        assert response.status_code == 200
        events = [e for e in read_events(response) if not isinstance(e, str)]
    assert events[-1].event == "done"
    doc = conversation_doc(db, alice.uid, events[0].data["conversationId"])
    assert doc is not None
    part = doc["messages"][0]["content"][1]
    assert part["type"] == "image"
    assert part["file"]["originalPath"] == path
    assert part["file"]["storagePath"] == path + ".normalised.jpg"
    assert part["file"]["name"] == "My homework (1).png"
    jpeg = asyncio.run(bucket.read(path + ".normalised.jpg", 25 * 1024 * 1024))
    assert not has_gps(jpeg)


def test_attachments_wrong_bytes_through_a_session_never_reach_a_message(
    api_url: str, db: firestore.Client, alice: StackUser, bucket: CloudStorageFileStore
) -> None:
    png = png_with_gps()

    def send(path: str, content_type: str, size: int) -> httpx.Response:
        ref = {"storagePath": path, "contentType": content_type, "sizeBytes": size}
        body = {"text": "Look", "attachments": [ref]}
        return httpx.post(api_url + SEND, headers=auth(alice, sse=False), json=body, timeout=20)

    # A PDF session given a PNG of the same size: the file keeps the session's type, and
    # the message API judges it by its bytes.
    session = start_upload(api_url, alice, "essay.pdf", "application/pdf", len(png))
    path = session["storagePath"]
    put = httpx.put(session["uploadUrl"], content=png, headers=session["headers"])
    assert put.is_success, put.text
    assert asyncio.run(bucket.stat(path)) == FileInfo(
        path, "application/pdf", len(png), "essay.pdf"
    )
    refused = send(path, "application/pdf", len(png))
    assert refused.status_code == 415
    message = refused.json()["error"]["message"]
    assert "application/pdf but its contents are image/png" in message

    # A session for a 10-byte-longer PDF given another size. Cloud Storage refuses the
    # PUT (the session's X-Upload-Content-Length); gcp-storage-emulator stores it (see
    # the xfail in test_file_store_contract.py). Either way no message takes it.
    pdf = pdf_with_pages("My essay")
    session = start_upload(api_url, alice, "essay.pdf", "application/pdf", len(pdf) + 10)
    path = session["storagePath"]
    httpx.put(session["uploadUrl"], content=pdf, headers=session["headers"])
    stored = asyncio.run(bucket.stat(path))
    refused = send(path, "application/pdf", len(pdf) + 10)
    if stored is None:
        assert refused.status_code == 404
    else:
        assert stored.size_bytes == len(pdf)
        assert refused.status_code == 400
        message = refused.json()["error"]["message"]
        assert f"is {len(pdf)} bytes, not the {len(pdf) + 10} given" in message
    assert no_conversation(db, alice.uid)
    assert asyncio.run(bucket.stat(path + ".text.txt")) is None
