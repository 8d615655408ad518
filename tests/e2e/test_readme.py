"""The README's and the getting-started page's examples, run: every ``curl`` line they
show against the local api is run as written (by ``bash``, with real ``curl``) against
the stack, in order (the README's first), and the answers shown
(``# {"status": "accepted", …}``) are checked, so neither can drift from what the api
does.

The blocks are run as a newcomer would, in one terminal: ``API`` as the README set it
last (on this stack's port), ``TOKEN`` a fresh token, and ``CONV=conv_…`` the
conversation id of the last answer. A block that starts ``make dev`` with settings of its own
(``SPARK_OFFLINE_TOKEN_DELAY_MS=1000 make dev``) is run against an ``api`` started with
those settings and the offline model.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.cloud import firestore

from shared.llm.demo import EXAMPLES
from tests.e2e.conftest import (
    ExtraApi,
    Functions,
    StackUser,
    conversation_doc,
    extra_api,
    offline_functions,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The pages whose sh blocks are run, in this order (a later block may use an earlier's CONV).
PAGES = (README, ROOT / "docs" / "getting-started.md")
LOCAL = "http://127.0.0.1:8080"
_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
_CONVERSATION = re.compile(r'"conversationId": ?"(conv_[A-Za-z0-9_-]+)"')


@dataclass
class Statement:
    """One shell statement of a block (continuation lines joined), and the answer the
    README shows after it, if any."""

    text: str
    answer: str | None = None


def statements(block: str) -> list[Statement]:
    found: list[Statement] = []
    lines = iter(block.splitlines())
    for line in lines:
        while line.endswith("\\"):
            line = line[:-1] + next(lines).strip()
        if line.startswith("# {") and found:
            found[-1].answer = line[2:]
        elif line.strip() and not line.startswith("#"):
            found.append(Statement(line.split("  #")[0].strip()))
    return found


def runnable_blocks() -> list[list[Statement]]:
    """The README's and the getting-started page's ``sh`` blocks that call the local api."""
    blocks = [statements(b) for page in PAGES for b in _BLOCK.findall(page.read_text())]
    return [b for b in blocks if any(_local_curl(s.text) for s in b)]


def _local_curl(text: str) -> bool:
    return text.startswith("curl ") and ("$API" in text or LOCAL in text)


def _settings(block: list[Statement]) -> dict[str, str]:
    """The variables a block's ``make dev`` line sets (``X=1 make dev``)."""
    for statement in block:
        words = shlex.split(statement.text)
        if words[-2:] == ["make", "dev"]:
            return dict(w.split("=", 1) for w in words[:-2])
    return {}


def matches(shown: object, got: object) -> bool:
    """``got`` has what the README shows: the same keys, and the same values except
    where it shows ``…`` (an id: any value that starts as shown)."""
    if isinstance(shown, dict):
        return (
            isinstance(got, dict)
            and set(shown) == set(got)
            and all(matches(shown[k], got[k]) for k in shown)
        )
    if isinstance(shown, str) and shown.endswith("…"):
        return isinstance(got, str) and got.startswith(shown[:-1])
    return shown == got


def test_the_readme_has_examples_to_run() -> None:
    blocks = runnable_blocks()
    readme = [statements(b) for b in _BLOCK.findall(README.read_text())]
    assert any(_local_curl(s.text) for b in readme for s in b), "the README's try-it is not run"
    assert len(blocks) >= 3
    assert any(_settings(b).get("SPARK_OFFLINE_TOKEN_DELAY_MS") for b in blocks)
    # The try-it shows the product, not an echo: one of the demo model's examples.
    assert f'{{"text":"{EXAMPLES[0]}"}}' in README.read_text()


@pytest.fixture(scope="module")
def functions(emulators: tuple[str, str]) -> Iterator[Functions]:
    """A stack with no provider key, as a newcomer's ``make dev`` runs: the demo model
    answers the README's lines, in the api and in the tasks function."""
    with offline_functions("readme") as stack:
        yield stack


@pytest.fixture
def slow_api(functions: Functions) -> Iterator[ExtraApi]:
    """An api with the offline model, slowed as the README's block asks."""
    (settings,) = [_settings(b) for b in runnable_blocks() if _settings(b)]
    offline = {"SPARK_MODEL": "gpt-4o-mini", "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
    api = extra_api(functions, **offline, **settings)
    try:
        yield api
    finally:
        api.stack.stop()


def run_block(block: list[Statement], api: str, token: str, state: dict[str, str]) -> None:
    for statement in block:
        text = statement.text
        if text.startswith("API="):
            state["API"] = text.removeprefix("API=")  # for this block and the next, as typed
            continue
        if not _local_curl(text):
            continue  # TOKEN=…, CONV=…, make dev: the test provides them
        env = {**os.environ, "TOKEN": token, "API": state.get("API", "").replace(LOCAL, api)}
        if "$CONV" in text:
            assert "CONV" in state, f"{text!r} needs a conversation id from an answer before it"
            env["CONV"] = state["CONV"]
        done = subprocess.run(
            ["bash", "-c", text.replace(LOCAL, api)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        # 28: curl's --max-time ended it, as the README means it to.
        assert done.returncode in (0, 28), f"{text!r} failed: {done.stderr}"
        assert done.stdout.strip(), f"{text!r} answered nothing"
        assert '"error"' not in done.stdout or statement.answer, f"{text!r}: {done.stdout}"
        if statement.answer is not None:
            shown = json.loads(statement.answer)
            got = json.loads(done.stdout)
            assert matches(shown, got), f"{text!r} answered {got}, the README shows {shown}"
        ids = _CONVERSATION.findall(done.stdout)
        if ids:
            state["CONV"] = ids[-1]
            state["seen"] = " ".join({*state.get("seen", "").split(), *ids})


def test_every_curl_line_of_the_readme_runs_and_answers_as_shown(
    functions: Functions, slow_api: ExtraApi, alice: StackUser, db: firestore.Client
) -> None:
    state: dict[str, str] = {}
    for block in runnable_blocks():
        api = slow_api.url if _settings(block) else functions.api
        run_block(block, api, alice.token, state)
    # The stopped reply ends in the slowed api, which must not stop before it has.
    for conversation_id in state["seen"].split():

        def ended(c: str = conversation_id) -> bool:
            return "activeRun" not in (conversation_doc(db, alice.uid, c) or {})

        wait_for(ended)
    # The README's lesson, drafted by the task the demo model asked for, and saved.
    lessons = db.collection(alice.uid).document("client").collection("lessons")
    wait_for(lambda: any("water cycle" in str(d.to_dict()) for d in lessons.stream()))
