"""The facade's verbs for families, their messages and users' settings: ``Agent``'s, kept
in a module of their own so the facade reads by concern (an edge still calls only
``Agent``)."""

from __future__ import annotations

from collections.abc import Sequence

from shared.agent.sending.opening import ERASED
from shared.attachments.service import Requested
from shared.auth.base import User
from shared.erasure.service import Erasures
from shared.errors import AccountDeleted, FamilyNotFound, NoFamily
from shared.families import progress
from shared.families.controls import ParentalControls
from shared.families.delivery import Delivered, Delivery, StoredFile
from shared.families.membership import NOT_YOURS
from shared.families.messages import Target
from shared.families.preferences import Preferences
from shared.families.safety import SafetyFlags
from shared.families.service import Families, ListedInvite, NewInvite
from shared.llm.demo import EXAMPLES
from shared.schemas.documents import Controls, FamilyRole, SafetyMirror, UserSettings
from shared.schemas.server import Family
from shared.store.base import LessonStore


class FamilyVerbs:
    """Families, their messages and settings, on the parts ``Agent`` holds."""

    _families: Families
    _delivery: Delivery
    _preferences: Preferences
    _lessons: LessonStore
    _erasures: Erasures | None
    _safety: SafetyFlags | None
    _controls: ParentalControls | None

    async def _alive(self, user_id: str) -> None:
        """Refuse a write under an account whose erasure has begun (a fresh read): the
        caller's ID token may outlive their account by up to an hour.

        Raises:
            AccountDeleted: it has begun.
        """
        if self._erasures is not None and await self._erasures.erased([user_id]):
            raise AccountDeleted(ERASED)

    @property
    def families(self) -> Families:
        """The family verbs (``Families``): create, invite, join, change roles, leave."""
        return self._families

    async def family_safety(self, user_id: str, family_id: str) -> SafetyMirror:
        """The flags raised for ``family_id``'s dependents, for its parent ``user_id``.

        Raises:
            FamilyNotFound: it is not the caller's family, or they are not a parent.
        """
        if self._safety is None:
            raise FamilyNotFound(NOT_YOURS)
        return await self._safety.read(user_id, family_id)

    async def set_controls(
        self, user_id: str, family_id: str, member_id: str, controls: Controls
    ) -> Controls:
        """A dependent's controls, set by their parent ``user_id`` (DESIGN §16), as
        written to the family and to the dependent's mirror.

        Raises:
            FamilyNotFound: not the caller's family, the caller is not a parent in it,
                or ``member_id`` is not a dependent of it.
        """
        if self._controls is None:
            raise FamilyNotFound(NOT_YOURS)
        await self._alive(user_id)
        return await self._controls.put(user_id, family_id, member_id, controls)

    async def family_progress(self, user_id: str, family_id: str) -> list[progress.MemberProgress]:
        """Each member's lessons, with their blanks and how many are answered, for a
        member of the family, read from the counts the lesson store keeps
        (``progress.of_members``: nothing is parsed).

        Raises:
            FamilyNotFound: it is not the caller's family.
        """
        try:
            family = await self._families.current(user_id)
        except NoFamily:
            family = None
        if family is None or family.id != family_id:
            raise FamilyNotFound(NOT_YOURS)
        return await progress.of_members(self._lessons, family.members)

    @property
    def delivery(self) -> Delivery:
        """Verbatim messages between family members (``Delivery.deliver``), and the
        files their messages carry (``Delivery.file``)."""
        return self._delivery

    @property
    def preferences(self) -> Preferences:
        """Users' settings (``Preferences``): the opt-out of AI reading family messages."""
        return self._preferences

    def examples(self, *, demo: bool) -> list[str]:
        """The requests the demo model recognises, for a client to offer (none otherwise)."""
        return list(EXAMPLES) if demo else []

    async def deliver(
        self,
        user_id: str,
        text: str,
        target: Target,
        *,
        attachments: Sequence[Requested] = (),
        idempotency_key: str | None = None,
    ) -> Delivered:
        """The user's own message to family members, verbatim (``Delivery.deliver``)."""
        await self._alive(user_id)
        return await self._delivery.deliver(
            user_id,
            text,
            target,
            attachments=attachments,
            via="user",
            idempotency_key=idempotency_key,
        )

    async def conversation_file(self, user_id: str, conversation_id: str, path: str) -> StoredFile:
        """A file a message in the user's copy carries (``Delivery.file``)."""
        return await self._delivery.file(user_id, conversation_id, path)

    async def create_family(self, user: User, name: str, display_name: str | None) -> Family:
        """A new family, with ``user`` its parent (``Families.create``)."""
        await self._alive(user.uid)
        return await self._families.create(user, name, display_name)

    async def current_family(self, user_id: str) -> Family:
        """The user's family (``Families.current``)."""
        return await self._families.current(user_id)

    async def join_family(self, user: User, token: str, display_name: str | None) -> Family:
        """Join with an invite link's token (``Families.join``)."""
        await self._alive(user.uid)
        return await self._families.join(user, token, display_name)

    async def invite(
        self,
        user_id: str,
        family_id: str,
        role: FamilyRole,
        *,
        max_uses: int,
        expires_in_hours: int,
    ) -> NewInvite:
        """A new invite link (``Families.invite``)."""
        return await self._families.invite(
            user_id, family_id, role, max_uses=max_uses, expires_in_hours=expires_in_hours
        )

    async def invites(self, user_id: str, family_id: str) -> list[ListedInvite]:
        """The family's invites, newest first (``Families.invites``)."""
        return await self._families.invites(user_id, family_id)

    async def revoke_invite(self, user_id: str, family_id: str, invite_id: str) -> None:
        """An invite link stops working (``Families.revoke``)."""
        await self._families.revoke(user_id, family_id, invite_id)

    async def set_role(
        self, user_id: str, family_id: str, member_id: str, role: FamilyRole
    ) -> Family:
        """A member's new role (``Families.set_role``)."""
        return await self._families.set_role(user_id, family_id, member_id, role)

    async def rename_member(
        self, user_id: str, family_id: str, member_id: str, display_name: str
    ) -> Family:
        """A member's new name in the family, chosen by themself (``Families.rename``)."""
        return await self._families.rename(user_id, family_id, member_id, display_name)

    async def remove_member(self, user_id: str, family_id: str, member_id: str) -> None:
        """A member leaves, or a parent removes them (``Families.remove``)."""
        await self._families.remove(user_id, family_id, member_id)

    async def update_settings(
        self, user_id: str, *, ai_reads_family_messages: bool
    ) -> UserSettings:
        """The user's settings changed (``Preferences.update``)."""
        await self._alive(user_id)
        return await self._preferences.update(
            user_id, ai_reads_family_messages=ai_reads_family_messages
        )
