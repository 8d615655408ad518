"""Young learners end to end (DESIGN §16): Auth-emulator users, the real api and tasks
functions (two processes each) on the Firestore emulator, and the OpenAI fake, whose
``/v1/moderations`` judges text by the offline word list and can be held (a moderator
that hangs). A dependent's flagged turn is answered kindly, a reply flagged half way
leaves only a note in the document, a hanging moderator holds the turn closed, a parent
reads the flags, and the dependent's request for them is 404. A parent's controls set
on one api process hold on the other at once: no model is asked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import ExtraApi, Functions, SseEvent, StackUser, settled, wait_for
from tests.e2e.test_family_agent import (  # noqa: F401 (home: a fixture)
    SEND,
    Household,
    as_,
    chat,
    home,
)
from tests.fakes.openai_server import FakeOpenAI, Hold, Script

pytestmark = pytest.mark.emulator

FAMILIES = "/api/spark/families"
NOTE = "(Spark AI Agent withheld this reply.)"


@pytest.fixture
def api(functions: Functions) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=functions.api, timeout=60) as client:
        yield client


def conversation_of(events: list[SseEvent]) -> str:
    return str(events[0].data["conversationId"])


def reply_in(db: firestore.Client, user: StackUser, conversation_id: str) -> dict[str, Any]:
    doc = wait_for(lambda: settled(db, user.uid, conversation_id, 2), what="the reply stored")
    return dict(doc["messages"][-1])


def in_background(api: httpx.Client, user: StackUser, text: str) -> str:
    """Send ``text`` without a stream (202: a Cloud Task answers it); its conversation."""
    accepted = api.post(SEND, headers=as_(user), json={"text": text})
    assert accepted.status_code == 202, accepted.text
    return str(accepted.json()["conversationId"])


def text_of(message: dict[str, Any]) -> str:
    return "".join(p.get("text") or "" for p in message["content"] if p["type"] == "text")


def test_e2e_a_flagged_turn_is_answered_kindly_and_its_parents_told(
    functions: Functions,
    api: httpx.Client,
    home: Household,  # noqa: F811
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    turn = f"I want to k1ll myself {home.family_id}"
    fake_openai.script(turn, Script(chunks=["The model's ", "own words."]))
    events = chat(functions.api, home.kid, turn)
    assert events[-1].event == "done" and events[-1].data["status"] == "complete"
    conversation_id = conversation_of(events)
    reply = reply_in(db, home.kid, conversation_id)
    assert "own words" not in text_of(reply) and "0800 1111" in text_of(reply)
    assert reply["moderated"] == {"direction": "input", "category": "self_harm"}

    # The parents read the flag; the dependent and an outsider are told nothing.
    for parent in (home.mum, home.dad):
        answer = api.get(f"{FAMILIES}/{home.family_id}/safety", headers=as_(parent))
        assert answer.status_code == 200, answer.text
        flags = [f for f in answer.json()["flags"] if f["conversationId"] == conversation_id]
        assert [(f["memberId"], f["direction"]) for f in flags] == [(home.kid.uid, "input")]
        assert "k1ll" not in answer.text
    for other in (home.kid, home.eve):
        refused = api.get(f"{FAMILIES}/{home.family_id}/safety", headers=as_(other))
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "family_not_found"


def test_e2e_a_reply_flagged_half_way_leaves_a_note(
    functions: Functions,
    home: Household,  # noqa: F811
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    turn = f"tell me about owls {home.family_id}"
    fake_openai.script(
        turn, Script(chunks=["Owls hunt at night. ", "Some say nobody likes you", ". The end."])
    )
    events = chat(functions.api, home.kid, turn)
    assert events[-1].event == "error" and events[-1].data["code"] == "withheld"
    reply = reply_in(db, home.kid, conversation_of(events))
    assert reply["status"] == "withheld"
    assert text_of(reply) == NOTE
    assert reply["moderated"] == {"direction": "output", "category": "harassment"}


def test_e2e_a_hanging_moderator_holds_a_dependents_turn_closed(
    functions: Functions,
    home: Household,  # noqa: F811
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    turn = f"what is seven times eight {home.family_id}"
    fake_openai.script(turn, Script(chunks=["Fifty-six."]))
    fake_openai.moderation_hold = Hold()
    try:
        events = chat(functions.api, home.kid, turn)
    finally:
        fake_openai.moderation_hold.release()
        fake_openai.moderation_hold = None
    assert events[-1].event == "error"
    assert events[-1].data["code"] == "moderation_unavailable"
    reply = reply_in(db, home.kid, conversation_of(events))
    assert "Fifty-six" not in text_of(reply)


def test_e2e_in_the_background_a_flagged_turn_and_a_flagged_reply_are_judged_alike(
    api: httpx.Client,
    home: Household,  # noqa: F811
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    """The same judgements when a task answers (202, the tasks function's process): a
    flagged turn is answered kindly and its parents told; a reply flagged half way
    leaves the note."""
    turn = f"I want to k1ll myself quietly {home.family_id}"
    fake_openai.script(turn, Script(chunks=["The model's ", "own words."]))
    flagged = in_background(api, home.kid, turn)
    reply = reply_in(db, home.kid, flagged)
    assert "own words" not in text_of(reply) and "0800 1111" in text_of(reply)
    assert reply["moderated"] == {"direction": "input", "category": "self_harm"}
    answer = api.get(f"{FAMILIES}/{home.family_id}/safety", headers=as_(home.mum))
    assert [f["direction"] for f in answer.json()["flags"] if f["conversationId"] == flagged] == [
        "input"
    ]

    turn = f"tell me about badgers {home.family_id}"
    fake_openai.script(
        turn, Script(chunks=["Badgers dig setts. ", "Some say nobody likes you", ". The end."])
    )
    withheld = reply_in(db, home.kid, in_background(api, home.kid, turn))
    assert withheld["status"] == "withheld" and text_of(withheld) == NOTE
    assert withheld["moderated"] == {"direction": "output", "category": "harassment"}


def test_e2e_a_parents_controls_set_on_one_api_hold_on_the_other(
    functions: Functions,
    api: httpx.Client,
    second_api: ExtraApi,
    home: Household,  # noqa: F811
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    consent = {"chat": False, "speech": True, "transcription": True, "moderation": True}
    url = f"{FAMILIES}/{home.family_id}/members/{home.kid.uid}/controls"
    put = api.put(url, headers=as_(home.mum), json={"consent": consent})
    assert put.status_code == 200, put.text
    assert put.json()["controls"]["consent"] == consent
    mirror = db.document(f"{home.kid.uid}/client/settings/controls").get()
    assert mirror.exists and mirror.to_dict()["consent"]["chat"] is False

    turn = f"what is seven times eight {home.family_id} controls"
    fake_openai.script(turn, Script(chunks=["Fifty-six."]))
    with httpx.Client(base_url=second_api.url, timeout=60) as other:
        for headers in ({"Accept": "text/event-stream"}, {}):  # streamed, and background
            sent = other.post(
                "/api/spark/agent/messages",
                headers={**as_(home.kid), **headers},
                json={"text": turn},
            )
            assert sent.status_code == 403, sent.text
            error = sent.json()["error"]
            assert (error["code"], error["reason"]) == ("parent_controls", "consent")
        # The parent allows it again, on the first process: the other one sees it at once.
        consent["chat"] = True
        assert api.put(url, headers=as_(home.dad), json={"consent": consent}).status_code == 200
        assert fake_openai.requests_for(turn) == []
        assert not [m for m in fake_openai.moderations if turn in json.dumps(m)]
        with httpx.stream(
            "POST",
            second_api.url + "/api/spark/agent/messages",
            headers={**as_(home.kid), "Accept": "text/event-stream"},
            json={"text": turn},
            timeout=60,
        ) as answered:
            assert answered.status_code == 200
            answered.read()
    assert len(fake_openai.requests_for(turn)) == 1
    conversations = db.collection(f"{home.kid.uid}/client/conversations").get()
    (conversation,) = [c.to_dict() for c in conversations]
    notice = conversation["messages"][0]
    assert notice["role"] == "system" and "an AI, not a person" in text_of(notice)
