"""Attachments reaching the model, and ``review_work``, over the whole local stack: files
in the Cloud Storage emulator, the real api and tasks functions, the Cloud Tasks and
Firestore emulators, and the fake OpenAI server reached by the real ``openai`` client."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e.conftest import (
    SseEvent,
    StackUser,
    auth,
    read_events,
    settled,
    upload,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Script
from tests.samples import pdf_with_pages, png_with_gps

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"
FEEDBACK = {
    "summary": "A clear explanation with one mix-up.",
    "strengths": ["You explain that leaves take in light."],
    "corrections": [
        {
            "where": "page 2",
            "issue": "Roots do not make food.",
            "suggestion": "Roots take in water.",
        }
    ],
    "nextSteps": ["Label a diagram of a leaf."],
    "mark": {"score": 7, "outOf": 10, "reason": "Accurate but for one mix-up."},
    "question": None,
}


def send(api_url: str, user: StackUser, body: dict[str, Any]) -> list[SseEvent]:
    with httpx.stream("POST", api_url + SEND, headers=auth(user), json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return [e for e in read_events(r) if isinstance(e, SseEvent)]


def user_parts(request: dict[str, Any]) -> list[dict[str, Any]]:
    content = request["messages"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def test_an_image_and_a_pdf_reach_the_model_as_an_image_part_and_paged_text(
    api_url: str,
    fake_openai: FakeOpenAI,
    alice: StackUser,
    bucket: CloudStorageFileStore,
) -> None:
    ask = "What do you make of these two?"
    fake_openai.script(ask, Script(chunks=["Both look good."]))
    png = upload(bucket, f"{alice.uid}/uploads/leaf.png", png_with_gps(), "image/png")
    pdf = upload(
        bucket,
        f"{alice.uid}/uploads/essay.pdf",
        pdf_with_pages("Leaves take in light", "Roots make food"),
        "application/pdf",
    )
    events = send(api_url, alice, {"text": ask, "attachments": [png, pdf]})
    assert events[-1].data["status"] == "complete"

    (request,) = fake_openai.requests_for(ask)
    parts = user_parts(request)
    assert [p["type"] for p in parts] == ["text", "image_url"]
    text = parts[0]["text"]
    assert text.startswith(ask + '\n\n[Image attached: "leaf.png"')
    assert "--- Page 1 ---\nLeaves take in light" in text
    assert "--- Page 2 ---\nRoots make food" in text
    head, _, data = parts[1]["image_url"]["url"].partition(";base64,")
    assert head == "data:image/jpeg"
    jpeg = asyncio.run(bucket.read(png["storagePath"] + ".normalised.jpg", 10**7))
    assert base64.b64decode(data) == jpeg  # the clean copy went, not the upload


def test_review_work_runs_on_cloud_tasks_and_appends_structured_feedback(
    api_url: str,
    fake_openai: FakeOpenAI,
    db: firestore.Client,
    alice: StackUser,
    bucket: CloudStorageFileStore,
) -> None:
    ask = "Please review my science homework, mark out of 10"
    path = f"{alice.uid}/uploads/science.pdf"
    pdf = upload(
        bucket, path, pdf_with_pages("Leaves take in light", "Roots make food"), "application/pdf"
    )
    args = {"file": path, "brief": "Explain photosynthesis.", "markOutOf": 10}
    fake_openai.script(
        ask,
        Script(
            chunks=["I will review it now."],
            tool_calls=[("review_work", json.dumps(args))],
            then=Script(chunks=["Well done: 7 out of 10. Roots take in water."]),
        ),
    )
    fake_openai.script("Review this piece of work.", Script(chunks=[json.dumps(FEEDBACK)]))

    events = send(api_url, alice, {"text": ask, "attachments": [pdf]})
    queued = next(e.data for e in events if e.event == "task_queued")
    assert (queued["tool"], queued["displayText"]) == ("review_work", "Reviewing science.pdf")
    conversation_id = events[0].data["conversationId"]

    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 4))
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "tool", "assistant"]
    (result,) = [p["toolResult"] for p in doc["messages"][2]["content"] if "toolResult" in p]
    assert result["status"] == "ok"
    output = json.loads(result["outputJson"])
    assert output["status"] == "reviewed" and output["name"] == "science.pdf"
    assert output["feedback"] == {k: v for k, v in FEEDBACK.items() if k != "question"}
    assert doc["messages"][-1]["content"] == [
        {"type": "text", "text": "Well done: 7 out of 10. Roots take in water."}
    ]
    (review,) = [  # (other tests' reviews go to the same fake model)
        r for r in fake_openai.requests_for("Review this piece of work.") if "science.pdf" in str(r)
    ]
    asked = user_parts(review)[0]["text"]
    assert "Give a mark out of 10." in asked
    assert "--- Page 2 ---\nRoots make food" in asked
    # The agent's follow-up read the feedback as the tool's result.
    follow_up = [r for r in fake_openai.requests_for(ask) if r["messages"][-1]["role"] == "tool"]
    assert "Roots take in water." in follow_up[-1]["messages"][-1]["content"]
