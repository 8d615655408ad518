"""Families on the in-memory store: every rule and every refusal of DESIGN §8."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta
from typing import Any

import pytest

from shared.auth.base import User
from shared.clock import ManualClock
from shared.errors import (
    AlreadyInFamily,
    FamilyFull,
    FamilyNotFound,
    InviteExpired,
    InviteNotFound,
    InviteRevoked,
    InviteUsedUp,
    LastParent,
    MemberNotFound,
    NoFamily,
    ParentOnly,
    RateLimited,
    SparkError,
    TooManyInvites,
)
from shared.families.audit import family_violations
from shared.families.membership import MAX_KEPT_INVITES, MAX_OPEN_INVITES, add_invite
from shared.families.service import Families, FamilyPolicy, display_name_of, token_hash
from shared.ids import SequentialIds
from shared.schemas.server import Family, Invite
from shared.store.base import Reads
from shared.store.households import (
    family_path,
    membership_path,
    mirror_path,
    plan,
    token_path,
)
from shared.store.memory import InMemoryFamilyStore

MUM = User(uid="mum", name="Mum Smith", email="mum@example.com")
DAD = User(uid="dad", email="dad.jones@example.com")
KID = User(uid="kid", name="Sam")
STRANGER = User(uid="stranger", name="Eve")
APP = "https://spark.example"


class World:
    def __init__(self, **policy: int) -> None:
        self.store = InMemoryFamilyStore()
        self.clock = ManualClock()
        self.families = Families(
            self.store, self.clock, SequentialIds(), FamilyPolicy(app_url=APP, **policy)
        )

    def doc(self, path: tuple[str, ...]) -> dict[str, Any] | None:
        return self.store.documents.get(path)

    def mirror(self, user: User) -> dict[str, Any] | None:
        return self.doc(mirror_path(user.uid))

    def violations(self, family_id: str, *users: User) -> list[str]:
        return family_violations(
            self.doc(family_path(family_id)),
            {u.uid: self.mirror(u) for u in users},
            {u.uid: self.doc(membership_path(u.uid)) for u in users},
            family_id=family_id,
        )

    async def household(self) -> tuple[Family, str, str]:
        """Mum's family with Dad (parent) and Sam (dependent): its id and two live
        links (parent, dependent) not yet used."""
        family = await self.families.create(MUM, "The Smiths")
        for user, role in ((DAD, "parent"), (KID, "dependent")):
            made = await self.families.invite(MUM.uid, family.id, role)
            await self.families.join(user, made.token)
        parent = await self.families.invite(MUM.uid, family.id, "parent", max_uses=5)
        dependent = await self.families.invite(DAD.uid, family.id, "dependent", max_uses=5)
        return await self.families.current(MUM.uid), parent.token, dependent.token


ALL = (MUM, DAD, KID, STRANGER)


@pytest.fixture
def world() -> World:
    return World()


async def test_create_makes_the_creator_a_parent_with_a_mirror(world: World) -> None:
    with pytest.raises(NoFamily) as missing:
        await world.families.current(MUM.uid)
    assert missing.value.status == 404 and missing.value.code == "no_family"
    family = await world.families.create(MUM, "  The Smiths  ")
    assert family.name == "The Smiths"
    assert [(m.user_id, m.display_name, m.role) for m in family.members] == [
        ("mum", "Mum Smith", "parent")
    ]
    assert await world.families.current(MUM.uid) == family
    assert world.mirror(MUM) == {
        "familyId": family.id,
        "name": "The Smiths",
        "myRole": "parent",
        "members": [
            {
                "userId": "mum",
                "displayName": "Mum Smith",
                "role": "parent",
                "joinedAt": world.clock.now(),
            }
        ],
        "updatedAt": world.clock.now(),
    }
    assert world.violations(family.id, *ALL) == []


async def test_one_family_per_user(world: World) -> None:
    family = await world.families.create(MUM, "The Smiths")
    before = dict(world.store.documents)
    with pytest.raises(AlreadyInFamily) as refused:
        await world.families.create(MUM, "Another")
    assert (refused.value.status, refused.value.code) == (409, "already_in_family")
    assert world.store.documents == before
    other = await world.families.create(STRANGER, "Elsewhere")
    made = await world.families.invite(STRANGER.uid, other.id, "parent")
    with pytest.raises(AlreadyInFamily):
        await world.families.join(MUM, made.token)
    assert (await world.families.current(MUM.uid)).id == family.id


async def test_invite_token_is_random_url_safe_shown_once_and_stored_as_its_hash(
    world: World,
) -> None:
    family = await world.families.create(MUM, "The Smiths")
    made = await world.families.invite(MUM.uid, family.id, "dependent")
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", made.token)  # 256 bits
    assert made.link == f"{APP}/join?token={made.token}"
    assert (made.invite.role, made.invite.max_uses, made.invite.uses) == ("dependent", 1, 0)
    assert made.invite.expires_at == world.clock.now() + timedelta(hours=72)
    assert world.doc(token_path(token_hash(made.token))) == {
        "familyId": family.id,
        "inviteId": made.invite.id,
    }
    stored = json.dumps({"/".join(p): d for p, d in world.store.documents.items()}, default=str)
    assert made.token not in stored
    other = await world.families.invite(MUM.uid, family.id, "dependent")
    assert other.token != made.token


async def test_join_adds_the_member_with_the_invites_role_and_mirrors_everyone(
    world: World,
) -> None:
    family = await world.families.create(MUM, "The Smiths")
    made = await world.families.invite(MUM.uid, family.id, "parent", max_uses=2)
    await world.clock.advance(60)
    joined = await world.families.join(DAD, made.token)
    assert [(m.user_id, m.display_name, m.role) for m in joined.members] == [
        ("mum", "Mum Smith", "parent"),
        ("dad", "dad.jones", "parent"),  # no name in the token: the e-mail's local part
    ]
    kid_link = await world.families.invite(DAD.uid, family.id, "dependent")
    joined = await world.families.join(KID, kid_link.token, display_name=" Sammy ")
    assert joined.member(KID.uid) is not None
    assert joined.member(KID.uid).display_name == "Sammy"  # type: ignore[union-attr]
    assert joined.member(KID.uid).role == "dependent"  # type: ignore[union-attr]
    for user, role in ((MUM, "parent"), (DAD, "parent"), (KID, "dependent")):
        mirror = world.mirror(user)
        assert mirror is not None
        assert mirror["myRole"] == role
        assert [m["userId"] for m in mirror["members"]] == ["mum", "dad", "kid"]
    assert world.mirror(STRANGER) is None
    invites = [listed.invite for listed in await world.families.invites(MUM.uid, family.id)]
    assert {(i.id, i.uses, tuple(i.used_by)) for i in invites} == {
        (made.invite.id, 1, ("dad",)),
        (kid_link.invite.id, 1, ("kid",)),
    }
    assert world.violations(family.id, *ALL) == []


async def test_a_retried_join_of_a_member_is_the_family_and_uses_nothing(world: World) -> None:
    family = await world.families.create(MUM, "The Smiths")
    made = await world.families.invite(MUM.uid, family.id, "dependent", max_uses=1)
    first = await world.families.join(KID, made.token)
    again = await world.families.join(KID, made.token)  # its answer was lost: ask again
    assert again == first
    (listed,) = await world.families.invites(MUM.uid, family.id)
    assert (listed.invite.uses, listed.status) == (1, "used_up")


@pytest.mark.parametrize(
    ("setup", "error", "code"),
    [
        ("forged", InviteNotFound, "invite_not_found"),
        ("used", InviteUsedUp, "invite_used_up"),
        ("revoked", InviteRevoked, "invite_revoked"),
        ("expired", InviteExpired, "invite_expired"),
    ],
)
async def test_each_refused_link_has_its_own_code_and_changes_nothing(
    world: World, setup: str, error: type[SparkError], code: str
) -> None:
    family = await world.families.create(MUM, "The Smiths")
    made = await world.families.invite(MUM.uid, family.id, "dependent", expires_in_hours=1)
    token = made.token
    if setup == "forged":
        token = token[:-1] + ("A" if token[-1] != "A" else "B")
    elif setup == "used":
        await world.families.join(DAD, token)
    elif setup == "revoked":
        await world.families.revoke(MUM.uid, family.id, made.invite.id)
    else:
        await world.clock.advance(3600)
    family_before = world.doc(family_path(family.id))
    with pytest.raises(error) as refused:
        await world.families.join(KID, token)
    assert refused.value.code == code
    assert refused.value.status == (404 if setup == "forged" else 410)
    assert "new" in refused.value.message  # it says what to do: ask for a new link
    assert world.doc(family_path(family.id)) == family_before
    assert world.mirror(KID) is None
    assert "familyId" not in (world.doc(membership_path(KID.uid)) or {})


async def test_a_family_holds_at_most_max_members() -> None:
    world = World(max_members=2)
    family = await world.families.create(MUM, "The Smiths")
    made = await world.families.invite(MUM.uid, family.id, "dependent", max_uses=3)
    await world.families.join(KID, made.token)
    with pytest.raises(FamilyFull) as refused:
        await world.families.join(DAD, made.token)
    assert (refused.value.status, refused.value.code) == (409, "family_full")
    assert len((await world.families.current(MUM.uid)).members) == 2
    assert world.mirror(DAD) is None


async def test_five_racing_for_the_last_use_one_joins(world: World) -> None:
    family = await world.families.create(MUM, "The Smiths")
    made = await world.families.invite(MUM.uid, family.id, "dependent", max_uses=1)
    racers = [User(uid=f"racer{n}", name=f"Racer {n}") for n in range(5)]
    results = await asyncio.gather(
        *(world.families.join(r, made.token) for r in racers), return_exceptions=True
    )
    joined = [r for r in results if isinstance(r, Family)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(joined) == 1 and len(refused) == 4
    assert all(isinstance(r, InviteUsedUp) for r in refused)
    family = await world.families.current(MUM.uid)
    assert len(family.members) == 2
    assert sum(world.mirror(r) is not None for r in racers) == 1


async def test_dependents_and_outsiders_can_do_none_of_the_parents_things(world: World) -> None:
    family, parent_link, _ = await world.household()
    invite_id = (await world.families.invites(MUM.uid, family.id))[0].invite.id
    before = dict(world.store.documents)
    attempts = {
        "invite": lambda u: world.families.invite(u.uid, family.id, "parent"),
        "list": lambda u: world.families.invites(u.uid, family.id),
        "revoke": lambda u: world.families.revoke(u.uid, family.id, invite_id),
        "promote": lambda u: world.families.set_role(u.uid, family.id, KID.uid, "parent"),
        "demote": lambda u: world.families.set_role(u.uid, family.id, DAD.uid, "dependent"),
        "remove": lambda u: world.families.remove(u.uid, family.id, DAD.uid),
    }
    for name, attempt in attempts.items():
        with pytest.raises(ParentOnly) as forbidden:
            await attempt(KID)
        assert (forbidden.value.status, forbidden.value.code) == (403, "parent_only"), name
        with pytest.raises(FamilyNotFound) as hidden:
            await attempt(STRANGER)
        assert (hidden.value.status, hidden.value.code) == (404, "family_not_found"), name
    with pytest.raises(FamilyNotFound):
        await world.families.remove(STRANGER.uid, family.id, STRANGER.uid)
    # What changed is only the allowances the attempts used.
    allowances = {membership_path(u.uid) for u in (KID, STRANGER)}
    assert {p: d for p, d in world.store.documents.items() if p not in allowances} == {
        p: d for p, d in before.items() if p not in allowances
    }
    assert world.violations(family.id, *ALL) == []
    assert parent_link


async def test_a_family_id_that_is_not_yours_is_404_even_if_it_exists(world: World) -> None:
    family, _, _ = await world.household()
    theirs = await world.families.create(STRANGER, "Elsewhere")
    for bad in (theirs.id, "fam_missing", "../x", "__x__", "a/b"):
        for attempt in (
            world.families.invite(MUM.uid, bad, "parent"),
            world.families.invites(MUM.uid, bad),
            world.families.set_role(MUM.uid, bad, KID.uid, "parent"),
            world.families.remove(MUM.uid, bad, MUM.uid),
            world.families.revoke(MUM.uid, bad, "inv_1"),
        ):
            with pytest.raises(FamilyNotFound):
                await attempt
    assert world.violations(family.id, *ALL) == []


async def test_unknown_members_and_invites_are_404(world: World) -> None:
    family, _, _ = await world.household()
    for bad in ("nobody", STRANGER.uid, "a/b", "..", "__x__"):
        with pytest.raises(MemberNotFound):
            await world.families.set_role(MUM.uid, family.id, bad, "parent")
        with pytest.raises(MemberNotFound):
            await world.families.remove(MUM.uid, family.id, bad)
    for bad in ("inv_missing", "a/b", "__x__"):
        with pytest.raises(InviteNotFound):
            await world.families.revoke(MUM.uid, family.id, bad)


async def test_roles_change_and_the_last_parent_stays_one(world: World) -> None:
    family, _, _ = await world.household()
    promoted = await world.families.set_role(MUM.uid, family.id, KID.uid, "parent")
    assert promoted.member(KID.uid).role == "parent"  # type: ignore[union-attr]
    assert world.mirror(KID)["myRole"] == "parent"  # type: ignore[index]
    await world.families.set_role(KID.uid, family.id, DAD.uid, "dependent")
    await world.families.set_role(KID.uid, family.id, MUM.uid, "dependent")
    assert [m.user_id for m in (await world.families.current(KID.uid)).parents] == ["kid"]
    with pytest.raises(LastParent) as refused:
        await world.families.set_role(KID.uid, family.id, KID.uid, "dependent")
    assert (refused.value.status, refused.value.code) == (409, "last_parent")
    with pytest.raises(LastParent):
        await world.families.remove(KID.uid, family.id, KID.uid)
    # Setting a role someone has changes nothing.
    same = await world.families.set_role(KID.uid, family.id, MUM.uid, "dependent")
    assert same == await world.families.current(KID.uid)
    assert world.violations(family.id, *ALL) == []


async def test_leaving_and_removing_take_the_mirror_away(world: World) -> None:
    family, _, _ = await world.household()
    left = await world.families.remove(KID.uid, family.id, KID.uid)  # anyone may leave
    assert left is not None and left.member(KID.uid) is None
    assert world.mirror(KID) is None
    with pytest.raises(NoFamily):
        await world.families.current(KID.uid)
    removed = await world.families.remove(MUM.uid, family.id, DAD.uid)  # a parent removes
    assert removed is not None and [m.user_id for m in removed.members] == ["mum"]
    assert world.mirror(DAD) is None
    assert world.violations(family.id, *ALL) == []
    # A former member may create or join another family.
    await world.families.create(DAD, "The Joneses")


async def test_the_last_member_leaving_ends_the_family_and_its_invites(world: World) -> None:
    family, parent_link, _ = await world.household()
    await world.families.remove(MUM.uid, family.id, KID.uid)
    await world.families.remove(DAD.uid, family.id, DAD.uid)
    assert await world.families.remove(MUM.uid, family.id, MUM.uid) is None
    assert world.store.documents.keys() <= {membership_path(u.uid) for u in ALL}
    with pytest.raises(InviteNotFound):
        await world.families.join(STRANGER, parent_link)
    assert world.violations(family.id, *ALL) == []


async def test_parents_list_and_revoke_invites_and_a_revoked_link_stops_at_once(
    world: World,
) -> None:
    family, parent_link, dependent_link = await world.household()
    invites = [listed.invite for listed in await world.families.invites(DAD.uid, family.id)]
    assert len(invites) == 4
    assert invites == sorted(invites, key=lambda i: i.created_at, reverse=True)
    target = next(i for i in invites if i.token_hash == token_hash(dependent_link))
    revoked = await world.families.revoke(DAD.uid, family.id, target.id)
    assert revoked.status(world.clock.now()) == "revoked"
    listed = await world.families.invites(MUM.uid, family.id)
    assert {(x.invite.id, x.status) for x in listed} >= {(target.id, "revoked")}
    assert await world.families.revoke(MUM.uid, family.id, target.id) == revoked  # again: same
    with pytest.raises(InviteRevoked):
        await world.families.join(STRANGER, dependent_link)
    await world.families.join(STRANGER, parent_link)


async def test_a_family_keeps_a_bounded_number_of_invites() -> None:
    world = World(invites_per_hour=1000)
    family = await world.families.create(MUM, "The Smiths")
    made = [await world.families.invite(MUM.uid, family.id, "dependent") for _ in range(20)]
    assert len(made) == MAX_OPEN_INVITES
    with pytest.raises(TooManyInvites) as refused:
        await world.families.invite(MUM.uid, family.id, "dependent")
    assert (refused.value.status, refused.value.code) == (409, "too_many_invites")
    for new in made:
        await world.families.revoke(MUM.uid, family.id, new.invite.id)
    for _ in range(3):
        for _ in range(MAX_OPEN_INVITES):
            made.append(await world.families.invite(MUM.uid, family.id, "dependent"))
        for new in made[-MAX_OPEN_INVITES:]:
            await world.families.revoke(MUM.uid, family.id, new.invite.id)
    kept = await world.families.invites(MUM.uid, family.id)
    assert len(kept) == MAX_KEPT_INVITES
    # The oldest ended ones went, with their tokens.
    assert world.doc(token_path(made[0].invite.token_hash)) is None
    assert world.doc(token_path(made[-1].invite.token_hash)) is not None


async def test_joins_are_limited_per_hour_and_a_forged_token_counts() -> None:
    world = World(joins_per_hour=3)
    family = await world.families.create(MUM, "The Smiths")
    for _ in range(3):
        with pytest.raises(InviteNotFound):
            await world.families.join(STRANGER, "guess")
    made = await world.families.invite(MUM.uid, family.id, "dependent")
    await world.clock.advance(600)
    with pytest.raises(RateLimited) as limited:
        await world.families.join(STRANGER, made.token)
    assert limited.value.status == 429 and limited.value.retry_after == 3000
    assert "50 minutes" in limited.value.message
    await world.clock.advance(3000)
    await world.families.join(STRANGER, made.token)


async def test_invite_links_are_limited_per_hour() -> None:
    world = World(invites_per_hour=2)
    family = await world.families.create(MUM, "The Smiths")
    await world.families.invite(MUM.uid, family.id, "dependent")
    await world.families.invite(MUM.uid, family.id, "dependent")
    with pytest.raises(RateLimited) as limited:
        await world.families.invite(MUM.uid, family.id, "dependent")
    assert limited.value.retry_after == 3600
    assert len(await world.families.invites(MUM.uid, family.id)) == 2


def test_display_names_come_from_the_token_or_the_choice() -> None:
    assert display_name_of(MUM) == "Mum Smith"
    assert display_name_of(DAD) == "dad.jones"
    assert display_name_of(User(uid="x")) == "Family member"
    assert display_name_of(MUM, "  Mummy\u0000\n ") == "Mummy"
    assert display_name_of(MUM, "\u200b") == "Mum Smith"  # nothing visible chosen
    assert display_name_of(User(uid="x", name="N" * 100)) == "N" * 80


async def test_the_audit_finds_a_mirror_that_disagrees(world: World) -> None:
    family, _, _ = await world.household()
    assert world.violations(family.id, *ALL) == []
    world.store.documents[mirror_path(KID.uid)]["myRole"] = "parent"
    world.store.documents.pop(mirror_path(DAD.uid))
    world.store.documents[mirror_path(STRANGER.uid)] = {"familyId": family.id}
    found = world.violations(family.id, *ALL)
    assert found == [
        "dad: a member of " + family.id + " without a mirror",
        "kid: the mirror does not match family " + family.id,
        f"stranger: not a member, but their mirror shows family {family.id}",
    ]


async def test_a_new_invite_writes_the_family_invite_and_token_but_no_mirror(
    world: World,
) -> None:
    family = await world.families.create(MUM, "The Smiths")
    before = await world.store.read(Reads(family_id=family.id, all_invites=True))
    invite = Invite(
        id="inv_x",
        family_id=family.id,
        role="dependent",
        max_uses=1,
        expires_at=world.clock.now() + timedelta(hours=1),
        created_at=world.clock.now(),
        created_by=MUM.uid,
        token_hash="ab" * 32,
    )
    after, _ = add_invite(before, caller=MUM.uid, invite=invite, now=world.clock.now())
    assert [w.path for w in plan(before, after)] == [
        family_path(family.id),
        ("families", family.id, "invites", "inv_x"),
        token_path("ab" * 32),
    ]
    assert after.family is not None and after.family.invite_ids == ["inv_x"]
