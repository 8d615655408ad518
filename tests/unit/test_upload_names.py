"""An upload keeps its owner's name for display ("My homework.png"), while its storage
path stays safe (``My_homework.png``); sizes are said as people read them (MB is
1,000,000 bytes); the offline model says what was attached as a person would."""

from __future__ import annotations

import pytest

from shared.clock import ManualClock
from shared.llm.offline import OfflineProvider
from shared.llm.scripted import ScriptedProvider, Step
from tests.samples import png_with_gps
from tests.unit.helpers import api_of, make_service, serving

UPLOADS = "/api/spark/agent/uploads"
MESSAGES = "/api/spark/agent/messages"
AUTH = {"Authorization": "Bearer alice-token"}
SSE = {**AUTH, "Accept": "text/event-stream"}


async def test_an_upload_keeps_its_own_name_for_display_and_the_offline_model_says_it() -> None:
    clock = ManualClock()
    harness = make_service(OfflineProvider(clock, token_delay=0), clock=clock)
    png = png_with_gps()
    async with serving(api_of(harness)) as client:
        started = await client.post(
            UPLOADS,
            headers=AUTH,
            json={"fileName": "My homework.png", "contentType": "image/png", "sizeBytes": len(png)},
        )
        assert started.status_code == 201
        path = started.json()["storagePath"]
        assert path.endswith("/My_homework.png")  # the path stays safe
        await harness.fakes.files.complete_upload(started.json()["uploadUrl"], png)
        attachment = {"storagePath": path, "contentType": "image/png", "sizeBytes": len(png)}
        sent = await client.post(
            MESSAGES, headers=SSE, json={"text": "Can you check it?", "attachments": [attachment]}
        )
    assert sent.status_code == 200
    (conversation,) = harness.store._documents.values()
    user, reply = conversation["messages"]
    (image,) = [p["file"] for p in user["content"] if "file" in p]
    assert image["name"] == "My homework.png"
    # The offline model quotes what the user wrote and names the file as they did; no
    # storage path, no note meant for a model.
    assert "You said: “Can you check it?”" in reply["content"][0]["text"]
    assert "You attached an image: My homework.png." in reply["content"][0]["text"]
    assert "uploads/" not in reply["content"][0]["text"]
    assert "[Image attached" not in reply["content"][0]["text"]


@pytest.mark.leaves_steps("uploads never call the model")
@pytest.mark.parametrize(
    ("size", "status", "words"),
    [
        (30_000_000, 413, "is 30 MB (30,000,000 bytes); uploads can be at most 25 MB"),
        (25_000_001, 413, "is 25 MB (25,000,001 bytes); uploads can be at most 25 MB"),
        (25_000_000, 201, None),
    ],
)
async def test_upload_sizes_are_said_in_the_megabytes_people_read(
    size: int, status: int, words: str | None
) -> None:
    harness = make_service(ScriptedProvider([Step.reply("-")]), clock=ManualClock())
    async with serving(api_of(harness)) as client:
        answer = await client.post(
            UPLOADS,
            headers=AUTH,
            json={"fileName": "big.pdf", "contentType": "application/pdf", "sizeBytes": size},
        )
    assert answer.status_code == status
    if words is not None:
        assert words in answer.json()["error"]["message"]
