"""The family routes (DESIGN §8): a family made, read and joined, its invites, its
members' roles and progress, and the caller's own settings and account (its erasure,
DESIGN §15, the caller's own or, by a parent, a dependent's)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.schemas.api import (
    ControlsInfo,
    ControlsRequest,
    ControlsResponse,
    CreateFamilyRequest,
    DeletionResponse,
    EraseAccountRequest,
    FamilyInfo,
    FamilyResponse,
    InviteInfo,
    InviteRequest,
    InviteResponse,
    InvitesResponse,
    JoinRequest,
    LessonProgressInfo,
    MemberProgressInfo,
    NameRequest,
    ProgressResponse,
    RoleRequest,
    SafetyFlagInfo,
    SafetyResponse,
    SettingsInfo,
    SettingsRequest,
    SettingsResponse,
)
from shared.schemas.deletions import Deletion
from shared.schemas.openapi.parts import operation, path_id
from shared.schemas.server import Family
from spark_http.edge import Edge, Routed

FAMILIES = "/api/spark/families"
FAMILY = f"{FAMILIES}/{{family_id}}"
# The path's ids as the OpenAPI document names them.
FAMILY_ID = path_id("familyId")
MEMBER_ID = path_id("userId", r"^[^/]{1,128}$")
_INVITE_ID = path_id("inviteId")


async def create_family(edge: Edge, request: Request) -> Response:
    """``POST /api/spark/families``: a new family, with the caller as its parent."""
    user, body = await edge.read(request, CreateFamilyRequest)
    family = await edge.agent.create_family(user, body.name, body.display_name)
    return _family(family, status=201)


async def current_family(edge: Edge, request: Request) -> Response:
    """``GET /api/spark/families/current``: the caller's family (404 ``no_family``)."""
    user = await edge.caller(request)
    return _family(await edge.agent.current_family(user.uid))


async def join_family(edge: Edge, request: Request) -> Response:
    """``POST /api/spark/families/join``: join with an invite link's token."""
    user, body = await edge.read(request, JoinRequest)
    return _family(await edge.agent.join_family(user, body.token, body.display_name))


async def create_invite(edge: Edge, request: Request) -> Response:
    """``POST .../families/{id}/invites``: a new link; its token is shown only here."""
    user, body = await edge.read(request, InviteRequest)
    made = await edge.agent.invite(
        user.uid,
        request.path_params["family_id"],
        body.role,
        max_uses=body.max_uses,
        expires_in_hours=body.expires_in_hours,
    )
    answer = InviteResponse(
        invite=InviteInfo.of(made.invite, "active"), token=made.token, link=made.link
    )
    # The token is a secret shown once: no cache may keep it.
    return JSONResponse(
        answer.model_dump(by_alias=True, mode="json"),
        status_code=201,
        headers={"Cache-Control": "no-store"},
    )


async def list_invites(edge: Edge, request: Request) -> Response:
    """``GET .../families/{id}/invites``: the family's invites, newest first."""
    user = await edge.caller(request)
    listed = await edge.agent.invites(user.uid, request.path_params["family_id"])
    answer = InvitesResponse(invites=[InviteInfo.of(i.invite, i.status) for i in listed])
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"))


async def revoke_invite(edge: Edge, request: Request) -> Response:
    """``DELETE .../families/{id}/invites/{inviteId}``: the link stops working at once."""
    user = await edge.caller(request)
    params = request.path_params
    await edge.agent.revoke_invite(user.uid, params["family_id"], params["invite_id"])
    return Response(status_code=204)


async def set_role(edge: Edge, request: Request) -> Response:
    """``PATCH .../families/{id}/members/{uid}``: a member's new role."""
    user, body = await edge.read(request, RoleRequest)
    params = request.path_params
    family = await edge.agent.set_role(
        user.uid, params["family_id"], params["member_id"], body.role
    )
    return _family(family)


async def rename_member(edge: Edge, request: Request) -> Response:
    """``PUT .../families/{id}/members/{uid}/name``: the caller's own new name."""
    user, body = await edge.read(request, NameRequest)
    params = request.path_params
    family = await edge.agent.rename_member(
        user.uid, params["family_id"], params["member_id"], body.display_name
    )
    return _family(family)


async def remove_member(edge: Edge, request: Request) -> Response:
    """``DELETE .../families/{id}/members/{uid}``: leave (oneself) or remove (parents)."""
    user = await edge.caller(request)
    params = request.path_params
    await edge.agent.remove_member(user.uid, params["family_id"], params["member_id"])
    return Response(status_code=204)


async def set_controls(edge: Edge, request: Request) -> Response:
    """``PUT .../families/{id}/members/{uid}/controls``: a dependent's controls (parents)."""
    user, body = await edge.read(request, ControlsRequest)
    params = request.path_params
    controls = await edge.agent.set_controls(
        user.uid, params["family_id"], params["member_id"], body.controls()
    )
    answer = ControlsResponse(controls=ControlsInfo.of(controls))
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"))


async def family_safety(edge: Edge, request: Request) -> Response:
    """``GET .../families/{id}/safety``: the flags raised for the dependents (parents)."""
    user = await edge.caller(request)
    mirror = await edge.agent.family_safety(user.uid, request.path_params["family_id"])
    answer = SafetyResponse(
        flags=[
            SafetyFlagInfo(
                id=f.id,
                member_id=f.member_id,
                category=f.category,
                direction=f.direction,
                conversation_id=f.conversation_id,
                at=f.at,
            )
            for f in mirror.flags
        ],
        updated_at=mirror.updated_at,
    )
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"))


async def family_progress(edge: Edge, request: Request) -> Response:
    """``GET .../families/{id}/progress``: each member's lessons and their blanks."""
    user = await edge.caller(request)
    family_id = request.path_params["family_id"]
    members = await edge.agent.family_progress(user.uid, family_id)
    answer = ProgressResponse(
        family_id=family_id,
        members=[
            MemberProgressInfo(
                user_id=m.user_id,
                display_name=m.display_name,
                role=m.role,
                lessons=[
                    LessonProgressInfo(
                        lesson_id=lp.lesson_id,
                        title=lp.title,
                        updated_at=lp.updated_at,
                        blanks=lp.blanks,
                        answered=lp.answered,
                    )
                    for lp in m.lessons
                ],
            )
            for m in members
        ],
    )
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"))


async def update_settings(edge: Edge, request: Request) -> Response:
    """``PATCH /api/spark/me/settings``: the caller's settings, truth and mirror."""
    user, body = await edge.read(request, SettingsRequest)
    settings = await edge.agent.update_settings(
        user.uid, ai_reads_family_messages=body.ai_reads_family_messages
    )
    answer = SettingsResponse(settings=SettingsInfo.model_validate(settings.model_dump()))
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"))


async def erase_account(edge: Edge, request: Request) -> Response:
    """``DELETE /api/spark/me``: erase the caller's account (202 ``{deletionId}``)."""
    user, _ = await edge.read(request, EraseAccountRequest)
    return _erasing(await edge.agent.erase_account(user.uid))


async def erase_dependent(edge: Edge, request: Request) -> Response:
    """``DELETE .../families/{id}/members/{uid}/account``: a parent erases a dependent's."""
    user, _ = await edge.read(request, EraseAccountRequest)
    params = request.path_params
    deletion = await edge.agent.erase_dependent(user.uid, params["family_id"], params["member_id"])
    return _erasing(deletion)


def _erasing(deletion: Deletion) -> Response:
    answer = DeletionResponse(deletionId=deletion.id)
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"), status_code=202)


def _family(family: Family, status: int = 200) -> Response:
    answer = FamilyResponse(family=FamilyInfo.of(family))
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"), status_code=status)


# The operations' errors (``parts.FAMILY_ERRORS``): 403 ``parent_only``, 404
# (``no_family``, ``family_not_found`` for a family that is not the caller's: never 403,
# ``member_not_found``, ``invite_not_found``), 409 (``already_in_family``,
# ``family_full``, ``last_parent``, ``too_many_invites``), 410 (``invite_expired``,
# ``invite_used_up``, ``invite_revoked``) and 429 with Retry-After.
_CHANGED = (200, "The family after the change.", FamilyResponse)
_ERASING = (202, "The erasure has begun; it runs as a task, in pages.", DeletionResponse)

_CREATE_FAMILY = operation(
    "Create a family; the caller becomes its parent (one family per user).",
    (201, "Created.", FamilyResponse),
    CreateFamilyRequest,
)
_CURRENT_FAMILY = operation(
    "The caller's family (404 no_family).", (200, "The family.", FamilyResponse)
)
_JOIN_FAMILY = operation(
    "Join the family of an invite link, with the invite's role.",
    (200, "Joined (or already a member).", FamilyResponse),
    JoinRequest,
)
_CREATE_INVITE = operation(
    "A new invite link (parents only). Its token is shown only in this answer.",
    (201, "Created.", InviteResponse),
    InviteRequest,
    (FAMILY_ID,),
)
_LIST_INVITES = operation(
    "The family's invites, newest first, without their tokens (parents only).",
    (200, "The invites.", InvitesResponse),
    parameters=(FAMILY_ID,),
)
_REVOKE_INVITE = operation(
    "Revoke an invite: its link stops working at once (parents only).",
    (204, "Revoked.", None),
    parameters=(FAMILY_ID, _INVITE_ID),
)
_SET_ROLE = operation(
    "Change a member's role (parents only; 409 last_parent).",
    _CHANGED,
    RoleRequest,
    (FAMILY_ID, MEMBER_ID),
)
_REMOVE_MEMBER = operation(
    "Leave the family (userId is the caller) or remove a member (parents only); "
    "the last member leaving ends the family.",
    (204, "Gone from the family.", None),
    parameters=(FAMILY_ID, MEMBER_ID),
)
_RENAME_MEMBER = operation(
    "Change the name the other members see: one's own only (403 otherwise).",
    _CHANGED,
    NameRequest,
    (FAMILY_ID, MEMBER_ID),
)
_ERASE_DEPENDENT = operation(
    "A parent deletes a dependent's account, as DELETE /api/spark/me does "
    "(parents of that family, for a dependent member only; 404 otherwise).",
    _ERASING,
    EraseAccountRequest,
    (FAMILY_ID, MEMBER_ID),
)
_SET_CONTROLS = operation(
    "Set a dependent's controls and consent (DESIGN §16): which processors may "
    "receive their data, quiet hours, a daily limit of turns. Parents of that "
    "family, for a dependent member only: anyone else, and any other member, "
    "is 404 family_not_found (nothing changed); a bad body 400, nothing "
    "changed. Mirrored to the dependent at /{uid}/client/settings/controls. "
    "A call the controls forbid is 403 parent_controls with reason consent, "
    "quiet_hours or daily_limit, and no provider is asked.",
    (200, "The controls as set.", ControlsResponse),
    ControlsRequest,
    (FAMILY_ID, MEMBER_ID),
)
_FAMILY_PROGRESS = operation(
    "Each member's lessons (title, updatedAt, blanks, answered), counted on the "
    "server (members only; any other family is 404 family_not_found).",
    (200, "The progress.", ProgressResponse),
    parameters=(FAMILY_ID,),
)
_FAMILY_SAFETY = operation(
    "The flags the moderator raised for the family's dependents, newest first "
    "(category, direction, conversation, time; never the words). Parents only: "
    "anyone else, a dependent of the family included, is 404 family_not_found.",
    (200, "The flags.", SafetyResponse),
    parameters=(FAMILY_ID,),
)
_UPDATE_SETTINGS = operation(
    "Change the caller's settings. aiReadsFamilyMessages false: no family "
    "message they wrote is given to any model, and their own agent reads no "
    "family messages, from the next model call on. Also written to the "
    "caller's mirror /{uid}/client/settings/current.",
    (200, "The settings after the change.", SettingsResponse),
    SettingsRequest,
)
_ERASE_ACCOUNT = operation(
    "Delete the caller's account: everything under /{uid}, their files, and "
    "last their sign-in (DESIGN §15). Their messages in others' copies stay, "
    "marked author.deleted and withheld from every model. 400 for a wrong "
    "confirmation; 409 last_parent when they are the only parent of a "
    "family with others (nothing deleted).",
    _ERASING,
    EraseAccountRequest,
)

# Routes of one path in the order their methods are named in ``Allow``.
ROUTES = (
    Routed(FAMILIES, "POST", create_family, operation=_CREATE_FAMILY),
    Routed(f"{FAMILIES}/current", "GET", current_family, operation=_CURRENT_FAMILY),
    Routed(f"{FAMILIES}/join", "POST", join_family, operation=_JOIN_FAMILY),
    Routed(f"{FAMILY}/invites", "POST", create_invite, operation=_CREATE_INVITE),
    Routed(f"{FAMILY}/invites", "GET", list_invites, operation=_LIST_INVITES),
    Routed(f"{FAMILY}/invites/{{invite_id}}", "DELETE", revoke_invite, operation=_REVOKE_INVITE),
    Routed(f"{FAMILY}/members/{{member_id}}", "PATCH", set_role, operation=_SET_ROLE),
    Routed(f"{FAMILY}/members/{{member_id}}", "DELETE", remove_member, operation=_REMOVE_MEMBER),
    Routed(f"{FAMILY}/members/{{member_id}}/name", "PUT", rename_member, operation=_RENAME_MEMBER),
    Routed(
        f"{FAMILY}/members/{{member_id}}/account",
        "DELETE",
        erase_dependent,
        operation=_ERASE_DEPENDENT,
    ),
    Routed(
        f"{FAMILY}/members/{{member_id}}/controls", "PUT", set_controls, operation=_SET_CONTROLS
    ),
    Routed(f"{FAMILY}/progress", "GET", family_progress, operation=_FAMILY_PROGRESS),
    Routed(f"{FAMILY}/safety", "GET", family_safety, operation=_FAMILY_SAFETY),
    Routed("/api/spark/me/settings", "PATCH", update_settings, operation=_UPDATE_SETTINGS),
    Routed("/api/spark/me", "DELETE", erase_account, operation=_ERASE_ACCOUNT),
)
