"""The record an account's erasure leaves (DESIGN §15): ``/deletions/{deletionId}``,
server-only, holding nothing of the person but a hash of their id.

While the erasure runs the record is also its progress: the step it has reached and
the pages it has committed. Every page is one batch that deletes documents and moves
the record on, on the condition that the record is still the version read; so a task
redelivered, killed or running twice resumes where the record says and never counts a
page twice. Once the erasure has begun the record is also the tombstone a new
conversation's creation reads (``Opening.send``), and the reason an erased member counts
as opted out of AI reading (``Preferences.opted_out``).

Its steps, in §15's order::

    stopping ─▶ family ─▶ documents ─▶ files ─▶ sweep ─▶ account ─▶ finished
    (runs,      (leave,    (pages of    (pages of  (documents and files
     tasks)      invites)   /{uid}/**)   {uid}/)    again, until a page
                                                    finds neither)
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field

from shared.schemas.documents import Document, Timestamp

Step = Literal["stopping", "family", "documents", "files", "sweep", "account", "finished"]
STEPS: tuple[Step, ...] = (
    "stopping",
    "family",
    "documents",
    "files",
    "sweep",
    "account",
    "finished",
)
CONFIRMATION = "delete my account"
"""What a person types to erase an account (``{confirm: "delete my account"}``)."""


def uid_hash(user_id: str) -> str:
    """What the record keeps of the person: the SHA-256 of their id, hex."""
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()


def deletion_id_of(user_id: str) -> str:
    """The id of a user's deletion record: derived from the id's hash, so a second
    request finds the first (one erasure per account) and a tombstone is one read."""
    return f"del_{uid_hash(user_id)[:40]}"


class DeletionCounts(Document):
    """What the erasure removed, counted as each page committed. Files are deleted
    before their page's commit (Cloud Storage is not in Firestore's transaction): those
    a delivery deleted and then lost its page's race for are gone but not counted."""

    documents: int = Field(default=0, ge=0)
    files: int = Field(default=0, ge=0)
    pages: int = Field(default=0, ge=0)
    # Other members' copies whose messages by this person were marked ``author.deleted``.
    copies_marked: int = Field(default=0, ge=0)


class Deletion(Document):
    """``/deletions/{id}``: who (as a hash), when asked, when done, what was removed,
    and (while it runs) the step reached."""

    id: str
    uid_hash: str
    requested_at: Timestamp
    finished_at: Timestamp | None = None
    counts: DeletionCounts = Field(default_factory=DeletionCounts)
    step: Step = "stopping"
    # Commits to this record so far: the step number a page's task is named by.
    version: int = Field(default=0, ge=0)
    # ``parent``: a parent erased a dependent's account.
    requested_by: Literal["self", "parent"] = "self"
