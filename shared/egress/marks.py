"""The family tools' marks, as the screen reads them (DESIGN §8, §13).

The family tools only *mark* what they give the model (``shared/tools/quoting.py``): a
``read_family_messages`` result names each message's author by userId and role (its
``from``) and the members whose words it carries (its ``quotes``), and every string a
member chose sits inside a fence (``<<quote-… name>>…<<end quote-…>>``). Who may be
given what is decided here, in the egress, from those marks: the screen
(``screen.py``) finds a result's members by them, and what was stored before names
were fenced is withheld or left out here, on every request, with no store read (none
of it depends on anyone's settings).

The tools' names and the fence's pattern are defined here, once, for the tools that
write the marks and the screen that reads them (the egress sits below the tools).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from shared.llm.base import ChatMessage

READ_TOOL = "read_family_messages"
LIST_TOOL = "list_family_members"
SEND_TOOL = "send_family_message"
FENCE_PREFIX = "quote-"
FENCED = re.compile(r"<<(quote-[0-9a-f]+) [a-z ]+>>(.*)<<end \1>>", re.DOTALL)
"""A member-chosen string between its markers (``quoting.fenced_name``)."""

OUTDATED = (
    "These family messages were read before members' names were quoted as data, so they "
    "are no longer shown to the agent. Read them again to see them."
)
OUTDATED_MEMBERS = (
    "This list of family members was made before members' names were quoted as data, so "
    "it is no longer shown to the agent. List them again to see it."
)


def is_fenced(text: Any) -> bool:
    """Whether ``text`` is one string as ``quoting.fenced_name`` quotes it."""
    found = FENCED.fullmatch(text) if isinstance(text, str) else None
    return found is not None and found[1] not in found[2]


def unfenced(text: str) -> str:
    """What ``quoting.fenced_name`` quoted (``text`` itself if it is not one): for what
    people read and hear, never for the model."""
    found = FENCED.fullmatch(text)
    return found[2] if found else text


def loaded(text: str) -> Any:
    """``text`` as JSON, or ``None`` if it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def is_refusal(value: Any) -> bool:
    """Whether a stored result is a tool's refusal (``{"error": …}``): it holds nothing
    of a member's."""
    return isinstance(value, dict) and set(value) == {"error"}


def current(value: dict[str, Any]) -> bool:
    """Whether a stored ``read_family_messages`` result was made with its authors'
    names fenced."""
    return all(
        isinstance(e, dict)
        and isinstance(e.get("from"), dict)
        and is_fenced(e["from"].get("displayName"))
        for e in value["messages"]
    )


def members(text: str) -> str:
    """One stored ``list_family_members`` result as the model may see it now: withheld
    if its names are not all fenced (made before they were, or cut); a refusal stays."""
    value = loaded(text)
    if is_refusal(value):
        return text
    if isinstance(value, dict) and isinstance(value.get("members"), list):
        names = [
            value.get("family"),
            *(m.get("displayName") if isinstance(m, dict) else None for m in value["members"]),
        ]
        if all(is_fenced(name) for name in names):
            return text
    return json.dumps({"withheld": OUTDATED_MEMBERS})


def _without_recipient(text: str) -> str:
    """A stored ``send_family_message`` call's arguments or result without a recipient
    named outside a fence (as one stored before recipients were fenced did: the
    arguments' ``recipient``, the result's ``to``); anything else as it is."""
    value = loaded(text)
    if not isinstance(value, dict) or is_fenced(value.get("recipient")):
        return text
    named = "to" if "sent" in value else "recipient"
    if named not in value:
        return text
    return json.dumps({k: v for k, v in value.items() if k != named}, ensure_ascii=False)


def refenced(history: Sequence[ChatMessage]) -> list[ChatMessage]:
    """``history`` as the family tools store it now, for what they stored before names
    were fenced: a members list is withheld and a send's recipient left out."""
    turns: list[ChatMessage] = []
    for turn in history:
        new = turn
        if turn.role == "tool" and turn.name == LIST_TOOL:
            new = replace(turn, text=members(turn.text))
        elif turn.role == "tool" and turn.name == SEND_TOOL:
            new = replace(turn, text=_without_recipient(turn.text))
        elif any(c.name == SEND_TOOL for c in turn.tool_calls):
            calls = tuple(
                replace(c, arguments=_without_recipient(c.arguments)) if c.name == SEND_TOOL else c
                for c in turn.tool_calls
            )
            new = replace(turn, tool_calls=calls)
        turns.append(new)
    return turns


def owners(entry: Any) -> frozenset[str]:
    """Whose words one entry of a ``read_family_messages`` result carries, as its marks
    name them: its author (``from.userId``) and the members it quotes (``quotes``)."""
    if not isinstance(entry, dict):
        return frozenset()
    author = entry.get("from")
    uid = author.get("userId") if isinstance(author, dict) else None
    found = {uid} if isinstance(uid, str) else set()
    quoted = entry.get("quotes")
    if isinstance(quoted, list):
        found.update(q for q in quoted if isinstance(q, str))
    return frozenset(found)


def messages(value: Any) -> list[Any] | None:
    """The entries of a stored ``read_family_messages`` result (``None``: not in the
    tool's shape)."""
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return list(value["messages"])
    return None
