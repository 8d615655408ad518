"""How a member is named for people: a card tells apart two members whose names read the
same by the day they joined, then by the end of their id."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime

from shared.schemas.documents import FamilyMember
from shared.schemas.server import Family

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


# The fewest characters of a member's id a card shows, when only their id tells them apart.
ID_TAIL = 5


def same_name(name: str) -> str:
    """A name as a person tells it from another: case, letter widths and spacing aside
    ("Dad", "dad" and "ＤＡＤ " read the same)."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def namesakes(family: Family, member: FamilyMember) -> list[FamilyMember]:
    """The other members whose name reads the same as ``member``'s."""
    name = same_name(member.display_name)
    return [
        m
        for m in family.members
        if m.user_id != member.user_id and same_name(m.display_name) == name
    ]


def _day(when: datetime) -> str:
    day = when.astimezone(UTC)
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def _tail(user_id: str, others: list[str]) -> str:
    """The shortest end of ``user_id`` (at least ``ID_TAIL`` characters) that none of
    ``others`` ends with."""
    for n in range(min(ID_TAIL, len(user_id)), len(user_id)):
        if not any(other.endswith(user_id[-n:]) for other in others):
            return user_id[-n:]
    return user_id


def member_label(family: Family, member: FamilyMember) -> str:
    """How a card names ``member``, for people: "Dad (parent)"; when another member's
    name reads the same, also the day they joined, which does not change ("Dad (parent,
    joined 3 March 2026)"), and when that is the same too, the end of their id ("…, id
    …a1234")."""
    others = namesakes(family, member)
    if not others:
        return f"{member.display_name} ({member.role})"
    day = _day(member.joined_at)
    said = [member.role, f"joined {day}"]
    twins = [m.user_id for m in others if _day(m.joined_at) == day]
    if twins:
        said.append(f"id …{_tail(member.user_id, twins)}")
    return f"{member.display_name} ({', '.join(said)})"
