"""Push-to-talk end to end: a clip spoken by espeak-ng (converted with PyAV) uploaded
through an upload session into the Cloud Storage emulator, sent as ``voice`` to the api
functions, transcribed by the real OpenAI SDK against our fake's
``/v1/audio/transcriptions``, and the transcript in Firestore as the visible user text
before the reply. The fake cannot hear: it is told what the clip's bytes say; the
silence is judged by our own decoder, and a clip the fake was told nothing about is
heard as nothing at all."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.attachments.voice import NO_SPEECH
from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e.conftest import StackUser, auth, conversation_doc, read_events, upload, wait_for
from tests.fakes.openai_server import FakeOpenAI, Script
from tests.voice_samples import SENTENCE, longer_than, not_audio, silence, spoken

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"
UPLOADS = "/api/spark/agent/uploads"


def no_conversation(db: firestore.Client, uid: str) -> bool:
    conversations = db.collection(uid).document("client").collection("conversations")
    return list(conversations.limit(1).stream()) == []


def test_voice_transcript_reaches_firestore_before_the_reply(
    api_url: str, db: firestore.Client, alice: StackUser, fake_openai: FakeOpenAI
) -> None:
    clip = spoken("audio/webm")
    fake_openai.hear(clip, SENTENCE)
    # The reply takes its time, so the user's words are seen in Firestore before it ends.
    fake_openai.script(SENTENCE, Script(chunks=["Fractions", " it", " is."], delay=0.4))
    started = httpx.post(
        api_url + UPLOADS,
        headers={**auth(alice, sse=False), "Origin": "http://localhost:5173"},
        json={"fileName": "clip", "contentType": "audio/webm;codecs=opus", "sizeBytes": len(clip)},
        timeout=20,
    )
    assert started.status_code == 201, started.text
    session = started.json()
    assert session["headers"] == {"Content-Type": "audio/webm"}
    assert session["uploadUrl"].startswith(os.environ["STORAGE_EMULATOR_HOST"])
    put = httpx.put(session["uploadUrl"], content=clip, headers=session["headers"], timeout=20)
    assert put.is_success, put.text

    seen: list[Any] = []
    user_text_before_done = None
    body = {"voice": {"storagePath": session["storagePath"]}}
    with httpx.stream("POST", api_url + SEND, headers=auth(alice), json=body, timeout=30) as r:
        assert r.status_code == 200
        for event in read_events(r):
            if isinstance(event, str):
                continue
            seen.append(event)
            if event.event == "text" and user_text_before_done is None:
                doc = conversation_doc(db, alice.uid, seen_start(seen)["conversationId"])
                assert doc is not None and "activeRun" in doc  # the reply is still going
                user_text_before_done = doc["messages"][0]["content"][0]["text"]
    names = [e.event for e in seen]
    assert names[0] == "transcript" and names[-1] == "done"
    transcript = [e.data for e in seen if e.event == "transcript"]
    assert names.index("run_start") == len(transcript)  # every transcript event first
    assert transcript[-1] == {"content": SENTENCE, "final": True}
    assert "".join(t["content"] for t in transcript[:-1]) == SENTENCE
    assert user_text_before_done == SENTENCE

    doc = wait_for(lambda: _settled(db, alice.uid, seen_start(seen)["conversationId"]))
    user, reply = doc["messages"]
    assert user["content"][0] == {"type": "text", "text": SENTENCE}
    clip_part = user["content"][1]
    assert clip_part["type"] == "file"
    assert clip_part["file"]["contentType"] == "audio/webm"
    assert clip_part["file"]["name"] == "clip"
    assert 3.0 < clip_part["file"]["durationSeconds"] < 3.5
    assert "".join(p.get("text", "") for p in reply["content"]) == "Fractions it is."
    said = fake_openai.transcriptions[-1]
    assert said["model"] == "gpt-4o-mini-transcribe" and said["stream"] is True
    assert said["size"] == len(clip)


def seen_start(events: list[Any]) -> dict[str, Any]:
    return next(e.data for e in events if e.event == "run_start")


def _settled(db: firestore.Client, uid: str, conversation_id: str) -> Any:
    doc = conversation_doc(db, uid, conversation_id)
    return doc if doc and "activeRun" not in doc and len(doc["messages"]) == 2 else None


def test_voice_refusals_are_clear_and_write_nothing(
    api_url: str,
    db: firestore.Client,
    alice: StackUser,
    bucket: CloudStorageFileStore,
    fake_openai: FakeOpenAI,
) -> None:
    def send(name: str, data: bytes, sse: bool = False) -> httpx.Response:
        path = f"{alice.uid}/uploads/upl_v/{name}"
        upload(bucket, path, data, "audio/webm")
        body = {"voice": {"storagePath": path}}
        return httpx.post(api_url + SEND, headers=auth(alice, sse=sse), json=body, timeout=30)

    before = len(fake_openai.transcriptions)
    quiet = send("quiet.webm", silence("audio/webm"))
    assert quiet.status_code == 422
    assert quiet.json()["error"]["code"] == "no_speech"
    assert quiet.json()["error"]["message"] == NO_SPEECH
    lying = send("note.wav", not_audio())
    assert lying.status_code == 415
    assert "could not be played as audio" in lying.json()["error"]["message"]
    long = send("long.webm", longer_than(121))
    assert long.status_code == 413
    assert "at most 120 seconds" in long.json()["error"]["message"]
    assert len(fake_openai.transcriptions) == before  # none of them reached the provider

    # A clip the provider hears nothing in: the stream had started, so it ends in error.
    unheard = spoken("audio/mpeg")
    with httpx.stream(
        "POST",
        api_url + SEND,
        headers=auth(alice),
        json={"voice": {"storagePath": _put(bucket, alice, "unheard.mp3", unheard)}},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        events = [e for e in read_events(response) if not isinstance(e, str)]
    assert [(e.event, e.data) for e in events] == [
        ("error", {"message": NO_SPEECH, "code": "no_speech"})
    ]
    assert len(fake_openai.transcriptions) == before + 1
    assert no_conversation(db, alice.uid)


def _put(bucket: CloudStorageFileStore, user: StackUser, name: str, data: bytes) -> str:
    path = f"{user.uid}/uploads/upl_v/{name}"
    upload(bucket, path, data, "audio/mpeg")
    return path
