"""The family routes of the OpenAPI document (DESIGN §8)."""

from __future__ import annotations

from typing import Any

from shared.schemas.api import (
    ControlsRequest,
    ControlsResponse,
    CreateFamilyRequest,
    DeletionResponse,
    EraseAccountRequest,
    FamilyResponse,
    InviteRequest,
    InviteResponse,
    InvitesResponse,
    JoinRequest,
    NameRequest,
    ProgressResponse,
    RoleRequest,
    SafetyResponse,
)
from shared.schemas.openapi.parts import operation, path_id

FAMILIES = "/api/spark/families"


def family_paths() -> dict[str, Any]:
    """DESIGN §8, the membership half: errors are 403 ``parent_only``, 404
    (``no_family``, ``family_not_found`` for a family that is not the caller's: never
    403, ``member_not_found``, ``invite_not_found``), 409 (``already_in_family``,
    ``family_full``, ``last_parent``, ``too_many_invites``), 410 (``invite_expired``,
    ``invite_used_up``, ``invite_revoked``) and 429 with Retry-After."""
    family = path_id("familyId")
    member = path_id("userId", r"^[^/]{1,128}$")
    invite = path_id("inviteId")
    changed = (200, "The family after the change.", FamilyResponse)
    erasing = (202, "The erasure has begun; it runs as a task, in pages.", DeletionResponse)
    return {
        "/api/spark/me": {
            "delete": operation(
                "Delete the caller's account: everything under /{uid}, their files, and "
                "last their sign-in (DESIGN §15). Their messages in others' copies stay, "
                "marked author.deleted and withheld from every model. 400 for a wrong "
                "confirmation; 409 last_parent when they are the only parent of a "
                "family with others (nothing deleted).",
                erasing,
                EraseAccountRequest,
            )
        },
        FAMILIES + "/{familyId}/members/{userId}/account": {
            "delete": operation(
                "A parent deletes a dependent's account, as DELETE /api/spark/me does "
                "(parents of that family, for a dependent member only; 404 otherwise).",
                erasing,
                EraseAccountRequest,
                (family, member),
            )
        },
        FAMILIES: {
            "post": operation(
                "Create a family; the caller becomes its parent (one family per user).",
                (201, "Created.", FamilyResponse),
                CreateFamilyRequest,
            )
        },
        FAMILIES + "/current": {
            "get": operation(
                "The caller's family (404 no_family).", (200, "The family.", FamilyResponse)
            )
        },
        FAMILIES + "/join": {
            "post": operation(
                "Join the family of an invite link, with the invite's role.",
                (200, "Joined (or already a member).", FamilyResponse),
                JoinRequest,
            )
        },
        FAMILIES + "/{familyId}/invites": {
            "post": operation(
                "A new invite link (parents only). Its token is shown only in this answer.",
                (201, "Created.", InviteResponse),
                InviteRequest,
                (family,),
            ),
            "get": operation(
                "The family's invites, newest first, without their tokens (parents only).",
                (200, "The invites.", InvitesResponse),
                parameters=(family,),
            ),
        },
        FAMILIES + "/{familyId}/invites/{inviteId}": {
            "delete": operation(
                "Revoke an invite: its link stops working at once (parents only).",
                (204, "Revoked.", None),
                parameters=(family, invite),
            )
        },
        FAMILIES + "/{familyId}/members/{userId}/name": {
            "put": operation(
                "Change the name the other members see: one's own only (403 otherwise).",
                changed,
                NameRequest,
                (family, member),
            )
        },
        FAMILIES + "/{familyId}/progress": {
            "get": operation(
                "Each member's lessons (title, updatedAt, blanks, answered), counted on the "
                "server (members only; any other family is 404 family_not_found).",
                (200, "The progress.", ProgressResponse),
                parameters=(family,),
            )
        },
        FAMILIES + "/{familyId}/members/{userId}/controls": {
            "put": operation(
                "Set a dependent's controls and consent (DESIGN §16): which processors may "
                "receive their data, quiet hours, a daily limit of turns. Parents of that "
                "family, for a dependent member only: anyone else, and any other member, "
                "is 404 family_not_found (nothing changed); a bad body 400, nothing "
                "changed. Mirrored to the dependent at /{uid}/client/settings/controls. "
                "A call the controls forbid is 403 parent_controls with reason consent, "
                "quiet_hours or daily_limit, and no provider is asked.",
                (200, "The controls as set.", ControlsResponse),
                ControlsRequest,
                (family, member),
            )
        },
        FAMILIES + "/{familyId}/safety": {
            "get": operation(
                "The flags the moderator raised for the family's dependents, newest first "
                "(category, direction, conversation, time; never the words). Parents only: "
                "anyone else, a dependent of the family included, is 404 family_not_found.",
                (200, "The flags.", SafetyResponse),
                parameters=(family,),
            )
        },
        FAMILIES + "/{familyId}/members/{userId}": {
            "patch": operation(
                "Change a member's role (parents only; 409 last_parent).",
                changed,
                RoleRequest,
                (family, member),
            ),
            "delete": operation(
                "Leave the family (userId is the caller) or remove a member (parents only); "
                "the last member leaving ends the family.",
                (204, "Gone from the family.", None),
                parameters=(family, member),
            ),
        },
    }
