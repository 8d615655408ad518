"""Young learners in the web client (DESIGN §16, issue 50), in Debian's Chromium against
the whole local stack, as ``test_web.py`` drives it (its fixtures, reused): a parent
sees, in the family panel's "Safety", a flag the moderator raised for their dependent
(who, when, what kind, which way; never the words), the dependent sees no such section;
the controls beside a dependent send the body the route takes and say the api's refusal
in its words, and against the api's route (skipped while the api has none) land in the
dependent's mirror; a dependent's send refused by the controls (403 ``parent_controls``)
is explained by its reason. Each scenario is seen at 1280×860 and 390×844 with no
serious or critical axe violation. Screenshots go to ``.stack/screenshots/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from google.cloud import firestore
from playwright.sync_api import BrowserContext, Locator, Page, Route, expect

from tests.e2e import test_web
from tests.e2e.conftest import Functions, new_user, wait_for
from tests.e2e.test_family_agent import Household, as_, chat
from tests.e2e.test_web import audit, on_phone, open_page, person, shot
from tests.fakes.openai_server import FakeOpenAI, Script

pytestmark = pytest.mark.emulator

# test_web's fixtures: the web client served against the stack, the browser, a context.
web = test_web.web
browser = test_web.browser
context = test_web.context

FAMILIES = "/api/spark/families"
DEFAULTS = {"chat": True, "speech": True, "transcription": True, "moderation": True}


@pytest.fixture
def api(functions: Functions) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=functions.api, timeout=60) as client:
        yield client


@pytest.fixture
def home(emulators: tuple[str, str], api: httpx.Client) -> Household:
    """Mum (parent), Dad (parent) and Kid (dependent) in "The Smiths"; Eve outside."""
    mum, dad, kid, eve = (new_user(emulators[1]) for _ in range(4))
    made = api.post(FAMILIES, headers=as_(mum), json={"name": "The Smiths", "displayName": "Mum"})
    assert made.status_code == 201, made.text
    family_id = made.json()["family"]["id"]
    for user, role, name in ((dad, "parent", "Dad"), (kid, "dependent", "Kid")):
        link = api.post(f"{FAMILIES}/{family_id}/invites", headers=as_(mum), json={"role": role})
        assert link.status_code == 201, link.text
        joined = api.post(
            f"{FAMILIES}/join",
            headers=as_(user),
            json={"token": link.json()["token"], "displayName": name},
        )
        assert joined.status_code == 200, joined.text
    return Household(mum, dad, kid, eve, family_id)


def no_violations(page: Page) -> None:
    found = audit(page)
    assert found == [], json.dumps(found, indent=1)


def family_panel(page: Page) -> Locator:
    panel = page.get_by_role("region", name="Family: The Smiths")
    expect(panel).to_be_visible()
    return panel


def flags_of(db: firestore.Client, uid: str) -> list[dict[str, Any]]:
    return list((db.document(f"{uid}/client/family/safety").get().to_dict() or {}).get("flags", []))


def test_web_a_parent_sees_a_dependents_flag_and_the_dependent_does_not(
    functions: Functions,
    web: str,
    browser: Any,
    context: BrowserContext,
    home: Household,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    """Kid's turn is stopped by the moderator (the offline word list, at the OpenAI
    fake's ``/v1/moderations``), which flags it to both parents; a second flag, a reply
    stopped, is put in Mum's mirror as the server writes one. Mum's "Safety" names Kid,
    the time, the category in words and which way, never the words; an empty state
    before. Kid, a dependent, has no such section."""
    mum = open_page(context, web, home.mum)
    safety = family_panel(mum).get_by_role("region", name="Safety")
    expect(safety.get_by_role("listitem")).to_have_text(["Nothing has been stopped."])
    no_violations(mum)

    turn = f"I want to k1ll myself {home.family_id}"
    fake_openai.script(turn, Script(chunks=["The model's own words."]))
    events = chat(functions.api, home.kid, turn)
    conversation_id = str(events[0].data["conversationId"])
    wait_for(
        lambda: any(f["conversationId"] == conversation_id for f in flags_of(db, home.mum.uid)),
        what="the flag in Mum's mirror",
    )
    stopped = safety.get_by_role("listitem")
    expect(stopped).to_have_count(1)
    expect(stopped).to_contain_text("Kid Something Kid wrote was stopped: self-harm.")
    # The time, as the flag has it, in words.
    expect(stopped.locator("time")).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT"))

    # A reply stopped half way (test_safety.py raises one through the api), a minute
    # later, put in the mirror as the server writes it.
    raised = next(f for f in flags_of(db, home.mum.uid) if f["conversationId"] == conversation_id)
    later = {**raised, "id": "web-output-flag", "direction": "output", "category": "violence"}
    later["at"] = raised["at"] + timedelta(minutes=1)
    db.document(f"{home.mum.uid}/client/family/safety").update(
        {"flags": firestore.ArrayUnion([later]), "updatedAt": firestore.SERVER_TIMESTAMP}
    )
    expect(stopped).to_have_count(2)
    expect(stopped.first).to_contain_text("A reply to Kid was stopped: violence.")
    expect(stopped.last).to_contain_text("Something Kid wrote was stopped: self-harm.")
    expect(mum.get_by_text("k1ll")).to_have_count(0)
    expect(mum.get_by_text("own words")).to_have_count(0)
    no_violations(mum)
    shot(mum, "safety-flags")
    on_phone(mum, "safety-flags", safety, pane="Family and editor")

    other = person(browser)
    try:
        kid = open_page(other, web, home.kid)
        panel = family_panel(kid)
        expect(panel).to_contain_text("You are a dependent in The Smiths.")
        expect(panel.get_by_role("region", name="Safety")).to_have_count(0)
        expect(kid.locator("#safety")).to_be_hidden()
        expect(panel.get_by_text(re.compile("^Controls for"))).to_have_count(0)
        on_phone(kid, "safety-dependent", panel, pane="Family and editor")
    finally:
        other.close()


def controls_of(page: Page, name: str) -> Locator:
    """The disclosure "Controls for {name}" opened; its form."""
    panel = family_panel(page)
    panel.get_by_text(f"Controls for {name}", exact=True).click()
    form = panel.get_by_role("form", name=f"Controls for {name}")
    expect(form).to_be_visible()
    return form


def fill_controls(form: Locator, zone: str) -> None:
    """Read aloud withdrawn, quiet from 21:00 to 07:00 in ``zone``, 20 turns a day."""
    form.get_by_role("checkbox", name="Replies read aloud").uncheck()
    form.get_by_label("Quiet from").fill("21:00")
    form.get_by_label("Quiet until").fill("07:00")
    form.get_by_role("combobox", name="Time zone").select_option(zone)
    form.get_by_role("spinbutton", name="Messages a day").fill("20")


WANTED = {
    "consent": {**DEFAULTS, "speech": False},
    "quietHours": {"start": "21:00", "end": "07:00", "timeZone": "Europe/London"},
    "dailyTurns": 20,
}


def test_web_the_controls_form_sends_the_routes_body_and_says_a_refusal(
    functions: Functions,
    web: str,
    context: BrowserContext,
    api: httpx.Client,
    home: Household,
) -> None:
    """The client's side of ``PUT .../members/{uid}/controls`` (caught at the network, so
    that it holds whatever the api has): the defaults shown first (every consent, no quiet
    hours, no limit, the browser's time zone), a limit out of range said in the form and
    nothing sent, half a quiet-hours span likewise; what is filled in survives the member
    list built again; then the body the route takes; a refusal shows the api's own
    message."""
    page = open_page(context, web, home.mum)
    form = controls_of(page, "Kid")
    for label in (
        "Chat with Spark AI Agent",
        "Replies read aloud",
        "Voice messages",
        "Safety checks",
    ):
        expect(form.get_by_role("checkbox", name=label)).to_be_checked()
    expect(form.get_by_role("checkbox", name="Safety checks")).to_have_accessible_description(
        re.compile("safety service")
    )
    zone = str(page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone"))
    expect(form.get_by_role("combobox", name="Time zone")).to_have_value(zone)
    expect(form.get_by_label("Quiet from")).to_have_value("")
    expect(form.get_by_role("spinbutton", name="Messages a day")).to_have_value("")
    no_violations(page)

    asked: list[Any] = []
    answers = [
        (200, {"controls": WANTED}),
        (
            400,
            {
                "error": {
                    "code": "invalid_request",
                    "message": "Quiet hours need a time zone Spark AI Agent knows.",
                }
            },
        ),
    ]

    def answer(route: Route) -> None:
        asked.append((route.request.method, route.request.post_data_json))
        status, body = answers[len(asked) - 1]
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))

    page.route(f"**{FAMILIES}/{home.family_id}/members/{home.kid.uid}/controls", answer)
    status = form.get_by_role("status")
    form.get_by_role("spinbutton", name="Messages a day").fill("600")
    form.get_by_role("button", name="Save controls for Kid").click()
    expect(status).to_have_text(re.compile("whole number from 1 to 500"))
    expect(form.get_by_role("spinbutton", name="Messages a day")).to_be_focused()
    form.get_by_role("spinbutton", name="Messages a day").fill("")
    form.get_by_label("Quiet from").fill("21:00")
    form.get_by_role("button", name="Save controls for Kid").click()
    expect(status).to_have_text(re.compile("both a start and an end"))
    expect(form.get_by_label("Quiet until")).to_be_focused()
    assert asked == []  # nothing sent while the form says what to change

    fill_controls(form, "Europe/London")
    # A change to the family (Dad renamed) builds the member list again: the form being
    # filled in stays open, as it was.
    renamed = api.put(
        f"{FAMILIES}/{home.family_id}/members/{home.dad.uid}/name",
        headers=as_(home.dad),
        json={"displayName": "Papa"},
    )
    assert renamed.status_code == 200, renamed.text
    expect(family_panel(page).get_by_role("list", name="Members")).to_contain_text("Papa")
    expect(form.get_by_role("spinbutton", name="Messages a day")).to_have_value("20")
    expect(form.get_by_label("Quiet from")).to_have_value("21:00")
    form.get_by_role("button", name="Save controls for Kid").click()
    expect(status).to_have_text("Kid's controls are saved.")
    assert asked == [("PUT", WANTED)]
    shot(page, "safety-controls-saved")

    form.get_by_role("button", name="Save controls for Kid").click()
    expect(status).to_have_text("Quiet hours need a time zone Spark AI Agent knows.")
    assert len(asked) == 2
    on_phone(page, "safety-controls-refused", form, pane="Family and editor")


def test_web_the_controls_saved_through_the_api_reach_the_dependents_mirror(
    functions: Functions,
    web: str,
    context: BrowserContext,
    api: httpx.Client,
    home: Household,
    db: firestore.Client,
) -> None:
    """The same against the api's route, once it has one: what Mum saves is in Kid's
    mirror ``/{uid}/client/settings/controls``, and the form shows what the api kept."""
    path = f"{FAMILIES}/{home.family_id}/members/{home.kid.uid}/controls"
    probe = api.put(path, headers=as_(home.mum), json={"consent": DEFAULTS})
    if probe.status_code in (404, 405):
        pytest.skip("this api has no controls route yet (it comes with issue 50's controls part)")
    assert probe.status_code == 200, probe.text
    page = open_page(context, web, home.mum)
    form = controls_of(page, "Kid")
    fill_controls(form, "Europe/London")
    form.get_by_role("button", name="Save controls for Kid").click()
    expect(form.get_by_role("status")).to_have_text("Kid's controls are saved.")

    def mirrored() -> dict[str, Any] | None:
        return db.document(f"{home.kid.uid}/client/settings/controls").get().to_dict()

    kept = wait_for(
        lambda: (m := mirrored()) and m.get("dailyTurns") == 20 and m, what="Kid's controls"
    )
    assert kept["consent"] == WANTED["consent"]
    assert kept["quietHours"] == WANTED["quietHours"]
    expect(form.get_by_role("checkbox", name="Replies read aloud")).not_to_be_checked()
    on_phone(page, "safety-controls-api", form, pane="Family and editor")


REASONS = {
    "consent": "A grown-up in your family has turned this off",
    "quiet_hours": "It is quiet time now",
    "daily_limit": "You have reached today's limit",
}


def test_web_a_dependents_send_refused_by_the_controls_is_explained_kindly(
    functions: Functions,
    web: str,
    context: BrowserContext,
    home: Household,
) -> None:
    """Kid's send answered 403 ``parent_controls`` (caught at the network, as the api
    answers it: the route's own refusal is the controls' tests'): each reason said in its
    words, never the generic message; the text stays in the box."""
    page = open_page(context, web, home.kid)
    reason = {"now": ""}

    def refuse(route: Route) -> None:
        body = {
            "error": {
                "code": "parent_controls",
                "message": "The parent's controls forbid this.",
                "reason": reason["now"],
            }
        }
        route.fulfill(status=403, content_type="application/json", body=json.dumps(body))

    page.route("**/api/spark/agent/messages", refuse)
    box = page.get_by_role("textbox", name="Message")
    status = page.locator("#composer-status")
    for why, words in REASONS.items():
        reason["now"] = why
        box.fill(f"web safety: {why}")
        page.get_by_role("button", name="Send").click()
        expect(status).to_contain_text(words)
        expect(status).not_to_contain_text("forbid")
        expect(box).to_have_value(f"web safety: {why}")
    no_violations(page)
    shot(page, "safety-refused")
    on_phone(page, "safety-refused", status)
