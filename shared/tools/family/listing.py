"""``list_family_members``: the members, their chosen names fenced, with the ids the
other family tools take."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from shared.families.service import Families
from shared.schemas.documents import FamilyMember
from shared.schemas.server import Family
from shared.tools.base import Tool, ToolContext
from shared.tools.family.common import Args, family_of
from shared.tools.family.names import namesakes
from shared.tools.quoting import (
    LIST_TOOL,
    NAMES_NOTE,
    fenced_name,
    fitted,
    new_fence,
)


class ListMembersArgs(Args):
    pass


def _listed(family: Family, member: FamilyMember, user_id: str, fence: str) -> dict[str, Any]:
    """One member as the model reads them: the chosen name fenced, the rest ours."""
    entry: dict[str, Any] = {
        "userId": member.user_id,
        "displayName": fenced_name(member.display_name, fence),
        "role": member.role,
        "joined": member.joined_at.astimezone(UTC).date().isoformat(),
    }
    if others := namesakes(family, member):
        entry["sharesNameWith"] = [m.user_id for m in others]
    if member.user_id == user_id:
        entry["you"] = True
    return entry


def list_family_members_tool(families: Families, output_chars: int) -> Tool[ListMembersArgs]:
    async def run(args: ListMembersArgs, context: ToolContext) -> dict[str, Any]:
        family = await family_of(families, context.user_id)
        fence = new_fence()
        value: dict[str, Any] = {
            "note": NAMES_NOTE.format(fence=fence),
            "family": fenced_name(family.name, fence, "family name"),
            "members": [_listed(family, m, context.user_id, fence) for m in family.members],
        }
        return fitted(value, "members", output_chars, drop=-1, counted="moreLeftOut")

    return Tool(
        name=LIST_TOOL,
        description=(
            "List the members of the user's family (names, roles, when they joined and "
            "the userId the other family tools take). Use it before reading or sending "
            "family messages when you need to know who is who."
        ),
        args=ListMembersArgs,
        display_text="Looking at your family",
        run=run,
    )
