"""The demo model: what the offline model says and does when no language model is
configured, so that a newcomer sees the product's tools at work.

It reads the latest user turn and recognises a few plain-language requests, then
calls the real tools with arguments drawn from the words, as a model's tool calls
would be (``EXAMPLES``); once a tool's result comes back it answers in words from it.
Anything else gets a short answer that says what it can show. The task tools' own
drafting calls (a lesson, a plan, a review) are answered by ``demo_drafts``.

Nothing here is known to the agent: it is what one adapter (``OfflineProvider``)
streams, behind the same ``ModelProvider`` interface and egress as every provider.
Every text it writes starts with ``PREFIX``.
What it says once a result comes back is ``demo_results``'.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import re2

from shared.llm.base import ChatMessage, ModelRequest, ToolSpec
from shared.llm.demo_drafts import draft, draft_kind
from shared.llm.demo_results import QUIZ_ANSWER, about, capital, member_name
from shared.prose import listed

PREFIX = "[Offline model] "


EXAMPLES = (
    "Please make a short lesson about the water cycle for Year 5",
    "Plan 3 lessons on fractions for Year 4",
    "Quiz me",
    "Show me the fill in the blanks rules",
    "What did my family say?",
    "Tell Mum I'll be home by six",
    "Delete the lesson",
)
"""What the demo model recognises, as a person would type it (the web client offers
these as buttons); attach a picture or a PDF and say "Check my work" for a review."""


@dataclass(frozen=True, slots=True)
class Call:
    """A tool the demo model asks for, with its arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Turn:
    """The demo model's reply: words, or tool calls (never both)."""

    text: str = ""
    calls: tuple[Call, ...] = ()


_NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def _pattern(pattern: str, flags: str = "") -> Any:
    """``pattern`` compiled by RE2 (google-re2), whose matching time is linear in the
    text: with Python's backtracking ``re``, a lazy ``.*?`` tried from each "make" of
    32 KB of "make make …" cost 1.2 s of the event loop's CPU. ``flags``: ``i`` (any
    case), ``s`` (``.`` takes newlines too). RE2's ``\\b`` and ``\\w`` are ASCII's; a
    name is read as Unicode letters (``_NAME``)."""
    return re2.compile(f"(?{flags})" + pattern if flags else pattern)


_COUNT = r"(?P<count>\d+|" + "|".join(_NUMBERS) + ")"
# A person's name as a person writes it (Zoë, O'Neill, Anne-Marie).
_NAME = r"[\p{L}\p{N}_'-]+"


_PLAN = _pattern(r"\bplan\s+" + _COUNT + r"\s+lessons?\s+(?:on|about)\s+(?P<rest>.+)", "is")


_LESSON = _pattern(
    r"\b(?:make|create|write|draft|prepare|give me)\b.*?\blesson\s+(?:on|about)\s+(?P<rest>.+)",
    "is",
)


_DURATION = _pattern(r"\b(\d{2,3})[- ]?(?:min|minute)s?\b", "i")


_SHORT = _pattern(r"\bshort\b", "i")


_DELETE = _pattern(r"\b(?:delete|remove)\b.*\blesson\b", "is")


_QUIZ = _pattern(r"\b(?:quiz|test|ask)\s+me\b", "i")


_READ = _pattern(
    r"\bwhat\s+(?:did|has|have)\s+(?:my\s+)?" + _NAME + r"\s+(?:say|said|write|written|sent)\b"
    r"|\bfamily\s+messages\b|\bread\s+(?:my\s+)?family\b",
    "i",
)


# "Tell me …" and "tell us …" ask for words, not a message: ``_told`` sets them apart
# (RE2 has no look-ahead).
_TELL = _pattern(
    r"^(?:please\s+)?(?:tell|message|text)\s+(?P<who>" + _NAME + r")"
    r"(?:\s+that)?[\s,:]+(?P<text>\S.*)$",
    "is",
)


_CHECK = _pattern(
    r"\b(?:check|review|mark|look at)\b.*\b(?:work|homework|essay|writing|answers?)\b", "is"
)


_MARK = _pattern(r"\bout of (\d{1,3})\b", "i")


_GREETING = _pattern(r"^\s*(hi|hello|hey|test|good (morning|afternoon|evening))\b", "i")


_OPEN_LESSON = _pattern(r"A lesson is open in this conversation \(id ([A-Za-z0-9_-]+)\)")


_DOCUMENT_ID = _pattern(r'"documentId": ?"([A-Za-z0-9_-]+)"')


_WORD = _pattern(r"[a-z]+")


# The notes a user turn carries after its text, one per attachment
# (``shared/agent/prompt/files.py``, ``describe``): what the model reads, never the user.
_NOTE = _pattern(r'(?:^|\n\n)\[(Image|PDF|Attachment)(?: attached)?(?: earlier)?:? "([^"\n]*)"')


_WORK_FILE = _pattern(r'\[(?:Image|PDF) attached: "[^"\n]*"[^\]\n]*?file "([^"\n]+)"')


_KINDS = {"Image": "an image", "PDF": "a PDF", "Attachment": "a file"}


_QUIZ_QUESTION = {
    "header": "Quiz",
    "question": "Water vapour cools and turns back into tiny droplets. What is that called?",
    "options": [{"label": "Evaporation"}, {"label": QUIZ_ANSWER}, {"label": "Precipitation"}],
}


_WHO_FAMILY = {"family", "everyone", "everybody", "all"}


def respond(request: ModelRequest) -> Turn:
    """The demo model's reply to ``request``: a drafting call's text, words about the
    tool results it was given last, or what the latest user turn asks for."""
    kind = draft_kind(request)
    if kind is not None:
        return Turn(text=draft(kind, request.messages))
    messages = request.messages
    if messages and messages[-1].role == "tool":
        return _after_results(request)
    last = next((m for m in reversed(messages) if m.role == "user"), None)
    return _asked(request, last.text if last is not None else "")


def _tools(request: ModelRequest) -> dict[str, ToolSpec]:
    return {tool.name: tool for tool in request.tools}


def _split(user_text: str) -> tuple[str, list[tuple[str, str]]]:
    """The user's words, and the (kind, name) of each attachment note after them."""
    first = _NOTE.search(user_text)
    if first is None:
        return user_text.strip(), []
    return user_text[: first.start()].strip(), _NOTE.findall(user_text[first.start() :])


def _told(words: str) -> Any:
    """The match of "tell Mum …" (``who``, ``text``), or ``None``: not one, or "tell me"."""
    told = _TELL.search(words)
    if told is None or told.group("who").lower() in ("me", "us"):
        return None
    return told


def _clean(text: str) -> str:
    return " ".join(text.split()).strip(" .!?")


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS.index(word.lower()) + 1


def _brief(rest: str, words: str) -> dict[str, Any]:
    """A lesson brief from what follows "a lesson about": its topic and, after "for",
    its learners; "short" or "N minutes" set the duration."""
    topic, _, audience = _clean(rest).rpartition(" for ")
    if not topic:
        topic, audience = _clean(rest), ""
    brief: dict[str, Any] = {"topic": topic[:200], "audience": (audience or "a mixed class")[:100]}
    minutes = _DURATION.search(words)
    if minutes and 10 <= int(minutes.group(1)) <= 180:
        brief["duration_minutes"] = int(minutes.group(1))
    elif _SHORT.search(words):
        brief["duration_minutes"] = 30
    return brief


def _skill(tools: dict[str, ToolSpec], words: str) -> str | None:
    """The skill ``words`` name ("fill in the blanks" names ``fill-blanks``)."""
    spec = tools.get("load_skill")
    if spec is None:
        return None
    said = set(_WORD.findall(words.lower()))
    names = spec.parameters.get("properties", {}).get("skill", {}).get("enum", [])
    return next((n for n in names if set(n.split("-")) <= said), None)


def _open_lesson(request: ModelRequest) -> str | None:
    """The lesson this conversation works on: the system prompt names it, else the last
    one a tool made here."""
    named = _OPEN_LESSON.search(request.system)
    if named:
        return str(named.group(1))
    for message in reversed(request.messages):
        if message.role == "tool" and not message.is_error:
            found = _DOCUMENT_ID.search(message.text)
            if found:
                return str(found.group(1))
    return None


def _asked(request: ModelRequest, user_text: str) -> Turn:
    """What the latest user turn asks for: a tool call, or words."""
    tools = _tools(request)
    words, notes = _split(user_text)
    work = _WORK_FILE.search(user_text)

    def call(name: str, **arguments: Any) -> Turn | None:
        return Turn(calls=(Call(name, arguments),)) if name in tools else None

    found: Turn | None = None
    if work and _CHECK.search(words):
        mark = _MARK.search(words)
        extra = {"markOutOf": int(mark.group(1))} if mark else {}
        found = call("review_work", file=work.group(1), brief=words[:4000], **extra)
    elif plan := _PLAN.search(words):
        args = _brief(plan.group("rest"), words)
        found = call("plan_lessons", count=min(_count(plan.group("count")), 10), **args)
    elif lesson := _LESSON.search(words):
        found = call("create_lesson", **_brief(lesson.group("rest"), words))
    elif _DELETE.search(words):
        lesson_id = _open_lesson(request)
        if lesson_id is None and "delete_lesson" in tools:
            return Turn(PREFIX + "There is no lesson open here to delete. Make one first: " + _EX)
        found = call("delete_lesson", lessonId=lesson_id)
    elif _QUIZ.search(words):
        found = call("ask_user_question", questions=[_QUIZ_QUESTION])
    elif _READ.search(words):
        found = call("read_family_messages")
    elif _told(words):
        found = call("list_family_members")
    elif skill := _skill(tools, words):
        found = call("load_skill", skill=skill)
    return found or Turn(_help(words, notes))


_EX = "“" + EXAMPLES[0] + "”."


def _help(words: str, notes: list[tuple[str, str]]) -> str:
    """What the demo model says to anything it does not recognise."""
    shown = "; ".join(f"“{e}”" for e in EXAMPLES)
    offer = (
        " With no language model configured, I am the demo model: I answer a few requests, "
        f"each with the real tools. Try one: {shown}; or attach a picture or a "
        "PDF of some work and say “Check my work”."
    )
    if _GREETING.match(words) and not notes:
        return (
            PREFIX + "Hello! I'm Spark AI Agent (set SPARK_MODEL and its provider's API key "
            "to talk to a real model)." + offer
        )
    quoted = " ".join(words.split())
    if len(quoted) > 200:
        quoted = quoted[:199] + "…"
    said = f"You said: “{quoted}”." if quoted else ""
    seen = _attached(notes) if notes else ""
    return (PREFIX + said + seen + offer).replace("  ", " ")


def _attached(notes: list[tuple[str, str]]) -> str:
    """ " You attached an image: My homework.png." for the notes' files."""
    names = [name for _, name in notes]
    kinds = {kind for kind, _ in notes}
    if len(names) == 1:
        what = _KINDS[notes[0][0]]
    elif kinds == {"Image"}:
        what = f"{len(names)} images"
    else:
        what = f"{len(names)} files"
    return f" You attached {what}: {listed(names)}."


def _after_results(request: ModelRequest) -> Turn:
    """Words about the results of the model's last calls (or, after the family's
    members were listed, the message the user asked to send)."""
    messages = request.messages
    results: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        results.insert(0, message)
    said: list[str] = []
    for result in results:
        if result.is_error:
            said.append(f"That did not work: {result.text}")
            continue
        try:
            output = json.loads(result.text)
        except ValueError:
            output = {}
        if not isinstance(output, dict):
            output = {}
        if result.name == "list_family_members":
            return _send(request, output)
        said.append(about(result.name or "", output))
    return Turn(PREFIX + " ".join(said))


def _send(request: ModelRequest, listing: dict[str, Any]) -> Turn:
    """The ``send_family_message`` call "tell Mum …" asked for, to the member named."""
    last = next((m for m in reversed(request.messages) if m.role == "user"), None)
    told = _told(_split(last.text if last is not None else "")[0])
    if told is None or "send_family_message" not in _tools(request):
        return Turn(PREFIX + "I could not tell whom to write to.")
    who, text = told.group("who"), told.group("text").strip()
    others = [m for m in listing.get("members", []) if not m.get("you")]
    named = [m for m in others if member_name(m.get("displayName")).lower() == who.lower()]
    if who.lower() in _WHO_FAMILY:
        to = "family"
    elif named or len(others) == 1:
        to = (named or others)[0]["userId"]
    else:
        members = listed([member_name(m.get("displayName")) for m in others]) or "nobody else"
        return Turn(PREFIX + f"I cannot find {who} in your family; its members are {members}.")
    return Turn(calls=(Call("send_family_message", {"to": to, "text": capital(text)}),))
