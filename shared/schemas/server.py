"""Server-only documents (rules deny clients): the per-user task ledger, and the
families with their invites.

``/{userId}/server`` holds every task of one user, so admitting a task against the
per-user limit and releasing its slot are single-document compare-and-set writes.

A family's truth is ``/families/{familyId}``, its invites beside it; each member reads
only the mirror written into their own subtree (``FamilyMirror``)::

    /families/{familyId}                     Family
    /families/{familyId}/invites/{inviteId}  Invite (the token only as its SHA-256)
    /inviteTokens/{sha256 of the token}      InviteToken: which invite a token opens
    /{userId}/server/family/membership       Membership: the user's family, allowances
    /{userId}/client/family/current          FamilyMirror (client-readable)
    /{userId}/client/settings/controls       Controls: a dependent's, as the family's
                                             ``controls`` hold them (client-readable)

Beside them, each user's server-only upkeep of what the api answers from (never parsed
again on a read): ``LessonsProgress`` (``/{userId}/server/progress/lessons``),
``SentMessages`` (``/{userId}/server/family/sent``) and ``ArchivedFile``
(``/{userId}/server/archivedFiles/{id}``); ``DeletedConversation``, what is left of a
conversation its owner deleted (``/{userId}/server/deletedConversations/{id}``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from shared.schemas.documents import (
    Controls,
    Document,
    FamilyMember,
    FamilyMirror,
    FamilyRole,
    TaskStatus,
    Timestamp,
)


class TaskRecord(Document):
    """One long-running tool call, from queued to finished.

    ``attempt`` counts the deliveries granted so far; each has its own Cloud Task,
    and only a handler for the current attempt may run the tool. ``started`` says a
    handler has claimed the current attempt; its lease must be renewed while it runs.
    """

    task_id: str
    kind: Literal["tool"] = "tool"
    conversation_id: str
    tool_call_id: str
    tool: str
    display_text: str
    seq: int
    status: TaskStatus
    attempt: int = 0
    started: bool = False
    lease_expires_at: Timestamp | None = None
    retry_at: Timestamp | None = None
    error: str | None = None
    # Its user asked it to stop while its tool ran: the handler ends it at the next step.
    cancel_requested: bool | None = None
    created_at: Timestamp
    updated_at: Timestamp


class RunSlot(Document):
    """A conversation of the user's with a reply being written, holding one of their
    slots until that run ends (or ``until``).

    ``joined`` are later runs of the same conversation admitted while ``run_id`` still
    held the slot (a follow-up opened as the run before it ends, a send about to lose
    its race for the conversation): each frees only itself, and the slot is free once
    none is left, so the run that ends last, not first, gives it back.
    """

    run_id: str
    until: Timestamp
    joined: list[str] = Field(default_factory=list)

    @property
    def members(self) -> list[str]:
        return [self.run_id, *self.joined]


class WaitingRun(Document):
    """A queued run refused a slot: it is handed to a task again when a slot frees.
    ``tries`` counts its refusals: each one is a write, so it is judged on the ledger as
    stored, never on a copy a process remembers."""

    run_id: str
    since: Timestamp
    tries: int = Field(default=1, ge=1)


class DailyUsage(Document):
    """Tokens the provider reported for this user's replies on ``day`` (UTC), and the
    upload sessions they started."""

    day: str
    tokens: int = Field(default=0, ge=0)
    uploads: int = Field(default=0, ge=0)
    voice_sessions: int = Field(default=0, ge=0)


class VoiceGrant(Document):
    """A live-audio session granted to the user (DESIGN §9), by its id.

    Counted against today's allowance before the provider is asked for its secret, so
    a refusal mints nothing; ``secret_hash`` (the secret's SHA-256: the secret itself
    is never stored) is written once the provider gave it. The first voice message
    naming the session redeems it (``conversation_id``); it then carries messages into
    that conversation only, until ``ends_at``.
    """

    provider: str
    model: str
    granted_at: Timestamp
    ends_at: Timestamp
    secret_hash: str | None = None
    expires_at: Timestamp | None = None  # the secret's: a connection must open by then
    conversation_id: str | None = None
    redeemed_at: Timestamp | None = None


class Reservation(Document):
    """Tokens set aside for one provider call before it is made (DESIGN §13): counted
    against the day while it lasts, replaced by what the call used when it is settled,
    and charged whole once ``until`` has passed unsettled (the client left, the stream
    broke or the process died)."""

    tokens: int = Field(ge=0)
    until: Timestamp
    kind: str


class TaskLedger(Document):
    """``/{userId}/server``: the user's tasks (live ones and the latest finished ones),
    the runs they have going, and today's token usage: one document, so every per-user
    limit is checked and taken in one compare-and-set write."""

    next_seq: int = 0
    tasks: dict[str, TaskRecord] = Field(default_factory=dict)
    runs: dict[str, RunSlot] = Field(default_factory=dict)  # by conversation id
    waiting: dict[str, WaitingRun] = Field(default_factory=dict)  # by conversation id
    usage: DailyUsage | None = None
    # Live-audio sessions (today's, and any not yet a day past their end), by id.
    voice: dict[str, VoiceGrant] = Field(default_factory=dict)
    # Provider calls under way outside a run (task tools, transcription, speech), by id.
    reservations: dict[str, Reservation] = Field(default_factory=dict)
    # When the user's data was last exported (``GET /api/spark/me/export``): one export
    # per ``shared/export/limit.EVERY``, decided in this document's compare-and-set.
    exported_at: Timestamp | None = None


class GivenAuthors(Document):
    """``/{userId}/server/provenance/current``: every family member whose words this
    user's model was ever given (the egress reads it before each model call)."""

    authors: list[str] = Field(default_factory=list)


class GivenText(Document):
    """``/{userId}/server/provenance/current/given/{messageId}``: one family message as
    this user's model was given it, kept so that an opt-out withholds it from every
    later request, whatever window, archive or task it has reached since."""

    message_id: str
    author_id: str
    text: str
    given_at: Timestamp


class FeedbackRecord(Document):
    """``/{userId}/server/feedback/{conversationId}.{messageId}``: a user's rating of one
    of Spark AI Agent's replies, kept server-side for quality review (a reviewer reads
    the ``feedback`` collection group); the latest rating of a reply replaces the one
    before, and the record goes with its conversation (and with the account)."""

    conversation_id: str
    message_id: str
    rating: Literal["up", "down"]
    comment: str | None = None
    at: Timestamp
    model: str | None = None  # the model that made the reply, when it is known


class Family(Document):
    """``/families/{familyId}``: the family as it is. Only the functions read it; every
    change is one transaction that also writes each member's ``FamilyMirror`` and the
    ``Membership`` of whoever joins or leaves."""

    id: str
    name: str = Field(min_length=1, max_length=80)
    members: list[FamilyMember]  # in the order they joined
    created_at: Timestamp
    updated_at: Timestamp
    # The invites it keeps (``invites/{id}``), so a change that needs them all reads
    # them by id, not by a query: on the emulator, a transaction that had queried one
    # family's invites held up the commit of another family's invite for the whole lock
    # timeout (2 s) and aborted it.
    invite_ids: list[str] = Field(default_factory=list)
    # Each dependent's parents' controls (DESIGN §16), by user id: kept in the family so
    # that the read which finds a user's role finds them too (no second read a call),
    # and so that a member who leaves, or becomes a parent, loses them in the same
    # change. A dependent without an entry has the defaults.
    controls: dict[str, Controls] = Field(default_factory=dict)

    def controls_of(self, user_id: str) -> Controls | None:
        """What ``user_id``'s parents allow, when they are a dependent here (else
        ``None``: no one controls a parent, nor a stranger)."""
        member = self.member(user_id)
        if member is None or member.role != "dependent":
            return None
        return self.controls.get(user_id) or Controls()

    def member(self, user_id: str) -> FamilyMember | None:
        """The member with this user id, if they belong to the family."""
        return next((m for m in self.members if m.user_id == user_id), None)

    @property
    def parents(self) -> list[FamilyMember]:
        return [m for m in self.members if m.role == "parent"]

    def mirror_for(self, user_id: str) -> FamilyMirror:
        """What member ``user_id`` reads at ``/{userId}/client/family/current``."""
        me = self.member(user_id)
        if me is None:
            raise ValueError(f"{user_id} is not a member of family {self.id}")
        return FamilyMirror(
            family_id=self.id,
            name=self.name,
            my_role=me.role,
            members=list(self.members),
            updated_at=self.updated_at,
        )


InviteStatus = Literal["active", "expired", "used_up", "revoked"]
"""Whether an invite still lets anyone join (``active``), and if not, why not."""


class Invite(Document):
    """``/families/{familyId}/invites/{inviteId}``: a link that lets up to ``max_uses``
    people join as ``role`` until ``expires_at``. The token itself is never stored: only
    its SHA-256 (``token_hash``, the id of its ``InviteToken``)."""

    id: str
    family_id: str
    role: FamilyRole
    max_uses: int = Field(ge=1)
    uses: int = Field(default=0, ge=0)
    expires_at: Timestamp
    created_at: Timestamp
    created_by: str
    token_hash: str
    revoked_at: Timestamp | None = None
    used_by: list[str] = Field(default_factory=list)  # who joined with it, in order

    def status(self, now: datetime) -> InviteStatus:
        """``active`` until it is revoked, used ``max_uses`` times or past ``expires_at``
        (the first of these that holds is the reason given)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.uses >= self.max_uses:
            return "used_up"
        if self.expires_at <= now:
            return "expired"
        return "active"


class InviteToken(Document):
    """``/inviteTokens/{sha256 of the token}``: which invite a token opens, so a join
    finds it by the token alone (in the same transaction that redeems it)."""

    family_id: str
    invite_id: str


class Membership(Document):
    """``/{userId}/server/family/membership``: the family the user belongs to (one at
    most, checked in the transaction that adds them), and when they last asked for
    invite links and tried to join (each list holds the last hour's, for the hourly
    allowances), and a dependent's turns today."""

    family_id: str | None = None
    invites_asked: list[Timestamp] = Field(default_factory=list)
    joins_tried: list[Timestamp] = Field(default_factory=list)
    # A dependent's turns today (``turns_day``, where they are: DESIGN §16), counted in
    # the transaction that judges a send on the family's ``dailyTurns``.
    turns_day: str | None = None
    turns: int = 0


class Receipt(Document):
    """``/{userId}/server/deliveries/{sha256 of an Idempotency-Key}``: the answer a
    verbatim message got, written in the same transaction that delivered it, so a retry
    with the same key (by the same sender, until ``expires_at``) gets this answer back
    and delivers nothing again. ``fingerprint`` is the SHA-256 of what was asked (the
    target, the text, the attachments): the same key for another request is refused."""

    fingerprint: str
    conversation_id: str
    message_id: str
    recipients: list[str]
    created_at: Timestamp
    expires_at: Timestamp


class LessonCounts(Document):
    """One lesson as its family's progress shows it: its title and last change, how many
    blanks (``<blank>``) it has and how many carry a non-empty ``student-answer``."""

    title: str
    updated_at: Timestamp
    blanks: int = Field(ge=0)
    answered: int = Field(ge=0)


class LessonsProgress(Document):
    """``/{userId}/server/progress/lessons``: the counts of the user's most recently
    updated lessons (at most ``shared/lessons/progress.KEPT``, by lesson id), written by
    the lesson store in the same write as each lesson it creates, replaces or deletes
    (``shared/lessons/progress.py`` keeps it), so a progress request parses nothing.

    ``lessons`` are always the user's newest: every lesson not in it was updated no
    later than the oldest in it. ``complete``: it holds every one of the user's lessons.
    ``writes`` counts the writes, so a refill (a summary rebuilt from the lessons) lands
    only over the version it read.
    """

    lessons: dict[str, LessonCounts] = Field(default_factory=dict)
    complete: bool = False
    writes: int = Field(default=0, ge=0)


class MinuteBytes(Document):
    """The bytes (``size``) of the messages sent in the minute starting at ``start``."""

    start: Timestamp
    size: int = Field(ge=0)


class SentMessages(Document):
    """``/{userId}/server/family/sent``: what the user's verbatim messages to family
    members took of their allowances (``shared/families/allowance.py``), written in the
    transaction that delivers each one: the times of the last minute's messages (at
    most the per-minute allowance), and the bytes sent in each minute of the last hour
    (at most 60)."""

    recent: list[Timestamp] = Field(default_factory=list)
    minutes: list[MinuteBytes] = Field(default_factory=list)


class ArchivedFile(Document):
    """``/{userId}/server/archivedFiles/{sha256 of conversationId and path}``: the archive
    segments of the user's copy of ``conversation_id`` whose messages name the file at
    ``path`` (its ``storagePath`` or ``textPath``), written with each segment, so that
    ``GET .../files?path=`` reads one segment rather than all of them."""

    conversation_id: str
    path: str
    segments: list[int] = Field(default_factory=list)


class DeletedConversation(Document):
    """``/{userId}/server/deletedConversations/{conversationId}``: a conversation its owner
    deleted, written in the commit that deletes it (no content): a delete repeated is
    told from one of an id that never named anything (204, not 404), and a delete that
    failed half-way is finished by the next."""

    conversation_id: str
    deleted_at: Timestamp
