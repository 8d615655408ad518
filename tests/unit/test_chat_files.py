"""An AI SDK chat's file parts: the bytes of a ``data:`` URL taken as an attachment of the
newest user message, through the same uploads and attachment rules as our own messages
route; a link, a type we do not take or a file over the bound refused before anything
is written."""

from __future__ import annotations

import base64
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from shared.attachment_rules import MAX_ATTACHMENTS, MAX_BYTES
from shared.budget.allowance import spend
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.server import TaskLedger
from shared.schemas.uichat import (
    ChatRequest,
    FileNotTaken,
    FileTooLarge,
    UnreadablePart,
    turn,
)
from tests.samples import pdf_with_pages, png_with_gps
from tests.unit.helpers import ALICE, Harness, api_of, make_service, serving

CHAT = "/api/spark/agent/chat"
ALICE_AUTH = {"Authorization": "Bearer alice-token"}


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def file_part(url: str, media_type: str = "image/png", name: str | None = "map.png") -> Any:
    part = {"type": "file", "mediaType": media_type, "url": url}
    return part if name is None else {**part, "filename": name}


def chat(*files: dict[str, Any], text: str = "Look at this") -> dict[str, Any]:
    parts = [*files, {"type": "text", "text": text}]
    return {"id": "conv_files", "messages": [{"id": "m1", "role": "user", "parts": parts}]}


# --- the mapping ----------------------------------------------------------------------


def test_a_data_url_file_is_taken_with_its_name_type_and_bytes() -> None:
    png, pdf = png_with_gps(), pdf_with_pages("Tides")
    body = chat(
        file_part(data_url("image/png", png)),
        file_part(data_url("application/pdf", pdf), "application/pdf", None),
    )
    asked = turn(ChatRequest.model_validate(body))
    assert asked.text == "Look at this"
    assert [(f.name, f.media_type, f.data) for f in asked.files] == [
        ("map.png", "image/png", png),
        ("file-2", "application/pdf", pdf),
    ]


@pytest.mark.parametrize(
    ("part", "error", "words"),
    [
        (file_part("https://example.com/map.png"), UnreadablePart, "fetches nothing from a link"),
        (file_part("http://127.0.0.1/x.png"), UnreadablePart, "fetches nothing"),
        (file_part("blob:http://localhost/1"), UnreadablePart, "fetches nothing"),
        (file_part("data:image/png,rawtext"), UnreadablePart, "not a base64 data: URL"),
        (file_part("data:image/png;base64,***"), UnreadablePart, "not valid base64"),
        (file_part("data:image/png;base64,"), UnreadablePart, "is empty"),
        (file_part(data_url("image/gif", b"GIF89a..."), "image/gif"), FileNotTaken, "only JPEG"),
        (file_part(data_url("text/plain", b"hi"), "text/plain"), FileNotTaken, "'text/plain'"),
        (
            file_part(data_url("image/png", b"%PDF-1.4 not a png")),
            FileNotTaken,
            "its contents are application/pdf",
        ),
        (file_part(data_url("image/png", b"\x00" * 20)), FileNotTaken, "not a JPEG, PNG or PDF"),
    ],
)
def test_a_file_that_cannot_be_taken_is_refused_in_words(
    part: dict[str, Any], error: type[UnreadablePart], words: str
) -> None:
    with pytest.raises(error, match=words) as caught:
        turn(ChatRequest.model_validate(chat(part)))
    assert type(caught.value) is error


def test_a_file_over_25_mb_is_refused_before_it_is_decoded() -> None:
    # Only its length is judged: base64 of MAX_BYTES + 1 bytes is longer than any of 25 MB.
    over = "A" * ((MAX_BYTES + 1 + 2) // 3 * 4)
    with pytest.raises(FileTooLarge, match="at most 25 MB"):
        turn(ChatRequest.model_validate(chat(file_part(f"data:image/png;base64,{over}"))))


def test_more_files_than_a_message_may_carry_are_refused() -> None:
    one = file_part(data_url("image/png", png_with_gps(4, 4)))
    with pytest.raises(UnreadablePart, match=f"at most {MAX_ATTACHMENTS} files"):
        turn(ChatRequest.model_validate(chat(*[one] * (MAX_ATTACHMENTS + 1))))


def test_files_in_earlier_messages_are_the_clients_history_and_ignored() -> None:
    body = chat(text="and now this")
    earlier = {"id": "m0", "role": "user", "parts": [file_part("https://example.com/x.png")]}
    body["messages"].insert(0, earlier)
    assert turn(ChatRequest.model_validate(body)).files == ()


# --- the route ------------------------------------------------------------------------


@pytest.fixture
def harness() -> Harness:
    return make_service(ScriptedProvider([Step.reply("A map of the coast.")]))


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(api_of(harness)) as client:
        yield client


async def test_a_chat_file_reaches_the_model_as_the_messages_route_attachment(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    png = png_with_gps()
    response = await client.post(
        CHAT, headers=ALICE_AUTH, json=chat(file_part(data_url("image/png", png)))
    )
    assert response.status_code == 200, response.text
    assert "A map of the coast." in response.text
    files = harness.fakes.files
    # Where an upload session would have put it, and made ready as any attachment.
    assert files.paths() == [
        "alice/uploads/upl_1/map.png",
        "alice/uploads/upl_1/map.png.normalised.jpg",
    ]
    (stored,) = harness.store._documents.values()
    (image,) = [p for p in stored["messages"][0]["content"] if "file" in p]
    assert image["type"] == "image"
    assert image["file"]["originalPath"] == "alice/uploads/upl_1/map.png"
    provider = harness.provider
    assert isinstance(provider, ScriptedProvider)
    (asked,) = [m for m in provider.requests[0].messages if m.role == "user"]
    assert asked.text.startswith("Look at this") or "Look at this" in asked.text
    (shown,) = asked.images
    assert shown.media_type == "image/jpeg"


@pytest.mark.leaves_steps
@pytest.mark.parametrize(
    ("part", "status", "code"),
    [
        (file_part("https://storage.example.com/map.png"), 400, "invalid_request"),
        (file_part(data_url("image/gif", b"GIF89a"), "image/gif"), 415, "unsupported_media_type"),
        (file_part(data_url("image/png", b"%PDF-1.4")), 415, "unsupported_media_type"),
    ],
)
async def test_a_chat_file_that_cannot_be_taken_is_a_4xx_that_changes_nothing(
    client: httpx.AsyncClient, harness: Harness, part: dict[str, Any], status: int, code: str
) -> None:
    response = await client.post(CHAT, headers=ALICE_AUTH, json=chat(part))
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert harness.fakes.files.paths() == []
    assert harness.store._documents == {}


@pytest.mark.leaves_steps
async def test_a_chat_body_over_its_bound_is_413(client: httpx.AsyncClient) -> None:
    response = await client.post(
        CHAT,
        headers={**ALICE_AUTH, "Content-Type": "application/json"},
        content=b'{"id": "conv_files", "messages": [' + b" " * (33 * 1024 * 1024) + b"]}",
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


async def _uploads_today(harness: Harness) -> int:
    usage = (await harness.fakes.ledger.get("alice")).usage
    return usage.uploads if usage is not None else 0


@pytest.mark.leaves_steps
@pytest.mark.parametrize("refusal", ["busy", "spent"])
async def test_a_refused_chat_send_leaves_no_file_and_spends_no_upload(
    refusal: str,
) -> None:
    harness = make_service(ScriptedProvider([]), daily_tokens_per_user=1000)
    conversation_id = "conv_files"
    if refusal == "busy":  # a reply being written there: 409
        live = await harness.start(ALICE, "hello")
        conversation_id = live.conversation_id
    else:  # today's tokens spent: 429

        def spent(ledger: TaskLedger) -> tuple[TaskLedger, None]:
            return spend(ledger, harness.deps.clock.now(), 1000), None

        await harness.fakes.ledger.apply("alice", spent)
    before = await _uploads_today(harness)
    body = {**chat(file_part(data_url("image/png", png_with_gps()))), "id": conversation_id}
    async with serving(api_of(harness)) as client:
        response = await client.post(CHAT, headers=ALICE_AUTH, json=body)
    assert response.status_code == (409 if refusal == "busy" else 429), response.text
    assert harness.fakes.files.paths() == []
    assert await _uploads_today(harness) == before


def test_a_data_url_file_is_decoded_into_one_copy_of_its_bytes() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(6 * 1024 * 1024)
    request = ChatRequest.model_validate(chat(file_part(data_url("image/png", png))))
    tracemalloc.start()
    try:
        (taken,) = turn(request).files
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert taken.data == png
    # The file's bytes, once, and a slice of its base64 at a time: not another copy of
    # its URL, nor of its bytes.
    assert peak < len(png) * 1.3, f"{peak:,} bytes to decode {len(png):,}"
