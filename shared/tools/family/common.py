"""What the three family tools share: the user's family, or the words that say they have
none, and their arguments' base."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from shared.errors import NoFamily, ToolError
from shared.families.service import Families
from shared.schemas.server import Family

FAMILY = "family"


NOT_IN_A_FAMILY = (
    "The user does not belong to a family, so there are no family members or messages. "
    "They can create a family, or ask a parent in one for an invite link."
)


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


async def family_of(families: Families, user_id: str) -> Family:
    try:
        return await families.current(user_id)
    except NoFamily:
        raise ToolError(NOT_IN_A_FAMILY) from None
