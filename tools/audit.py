"""Check the invariants of users' stored state (``shared/audit/``) on Firestore: the
emulator when ``FIRESTORE_EMULATOR_HOST`` is set, else the project's real database.
It only reads (no write of any kind).

    python -m tools.audit --user UID [--user UID ...]   # these users
    python -m tools.audit --all-users                   # every user (one read per document)
    python -m tools.audit --user UID --wait 30          # wait for them to settle first

Without ``--wait`` it checks what holds at any moment plus the leases (a run or task
past its lease and the watchdog's grace); with ``--wait`` it first polls until the
users have no run active and no task live, then checks the settled invariants too
(and reports as ``unsettled`` what is still going on when the time is up). It prints
the violations grouped by kind and exits 1 if there is any.

Tests use ``settle_and_audit`` (``tests/e2e/conftest.py`` runs it after every
end-to-end test, on the users the test made).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from google.cloud import firestore

from shared.audit import (
    Audit,
    UserDocuments,
    Violation,
    audit,
    grouped,
    pending,
    shared_copies,
)
from shared.auth.base import SERVER_COLLECTIONS
from shared.config import Settings
from shared.families.audit import family_violations
from shared.families.preferences import settings_violations
from shared.lessons import progress
from shared.schemas.documents import Lesson
from shared.store.households import family_path, membership_path, mirror_path
from shared.store.settings import settings_mirror_path, settings_path

# How often ``--wait`` reads the users' documents again.
POLL_SECONDS = 0.25


def read_user(db: firestore.Client, user_id: str) -> UserDocuments:
    """Everything of ``user_id``'s that the invariants speak of, read as stored."""
    server = db.collection(user_id).document("server").get()
    conversations: dict[str, dict[str, Any]] = {}
    archives: dict[str, list[dict[str, Any]]] = {}
    collection = db.collection(user_id).document("client").collection("conversations")
    for snapshot in collection.stream():
        conversations[snapshot.id] = snapshot.to_dict() or {}
        segments = snapshot.reference.collection("archive").order_by("segment").stream()
        archives[snapshot.id] = [s.to_dict() or {} for s in segments]
    sections = db.collection(user_id).document("client").collection("tasks").stream()
    return UserDocuments(
        user_id,
        server.to_dict() if server.exists else None,
        conversations,
        archives,
        {s.id: s.to_dict() or {} for s in sections},
    )


def _stored(db: firestore.Client, path: tuple[str, ...]) -> dict[str, Any] | None:
    snapshot = db.document(*path).get()
    return snapshot.to_dict() if snapshot.exists else None


def family_check(db: firestore.Client, user_ids: Iterable[str]) -> list[Violation]:
    """Every family the users are in (by their membership or their mirror): each member
    has exactly one mirror and it matches the family, and each membership points at it
    (``shared/families/audit.py``). Each document is read once."""
    read: dict[tuple[str, ...], dict[str, Any] | None] = {}

    def stored(path: tuple[str, ...]) -> dict[str, Any] | None:
        if path not in read:
            read[path] = _stored(db, path)
        return read[path]

    found: list[Violation] = []
    families: dict[str, set[str]] = {}
    for uid in user_ids:
        for document in (stored(membership_path(uid)), stored(mirror_path(uid))):
            family_id = (document or {}).get("familyId")
            if family_id:
                families.setdefault(family_id, set()).add(uid)
    for family_id, seen in sorted(families.items()):
        family = stored(family_path(family_id))
        members = {m.get("userId") for m in (family or {}).get("members", [])} - {None}
        people = sorted(seen | {str(m) for m in members})
        mirrors = {uid: stored(mirror_path(uid)) for uid in people}
        memberships = {uid: stored(membership_path(uid)) for uid in people}
        path = "/" + "/".join(family_path(family_id))
        for detail in family_violations(family, mirrors, memberships, family_id=family_id):
            found.append(Violation("family_mirror", people[0], path, detail))
    return found


def settings_check(db: firestore.Client, user_ids: Iterable[str]) -> list[Violation]:
    """Each user's settings mirror says what their truth says (``preferences.py``)."""
    found: list[Violation] = []
    for uid in user_ids:
        truth, mirror = _stored(db, settings_path(uid)), _stored(db, settings_mirror_path(uid))
        path = "/" + "/".join(settings_mirror_path(uid))
        found += [
            Violation("settings_mirror", uid, path, d) for d in settings_violations(truth, mirror)
        ]
    return found


def progress_check(db: firestore.Client, user_ids: Iterable[str]) -> list[Violation]:
    """Each user's progress summary says what their lessons say (``progress.violations``:
    read whole, every lesson, one read each)."""
    found: list[Violation] = []
    for uid in user_ids:
        summary = _stored(db, progress.summary_path(uid))
        if summary is None:
            continue  # none yet: the next progress request refills it
        lessons = db.collection(uid).document("client").collection("lessons").stream()
        everything = [Lesson.model_validate(s.to_dict() or {}) for s in lessons]
        path = "/" + "/".join(progress.summary_path(uid))
        found += [
            Violation("lesson_progress", uid, path, detail)
            for detail in progress.violations(summary, everything)
        ]
    return found


def all_users(db: firestore.Client) -> list[str]:
    """Every user id with documents (each user is a top-level collection; the family
    system's own collections are not users)."""
    return sorted(c.id for c in db.collections() if c.id not in SERVER_COLLECTIONS)


def _settled_check(documents: UserDocuments, settings: Settings) -> list[Violation]:
    now = datetime.now(UTC)
    return audit(documents, Audit.of(settings, now=now, settled=True))


# Settled invariants that the last steps of finished work still repair (a run's slot is
# freed just after its run is closed; a follow-up is opened just after the last result):
# waited for, like runs and tasks, and violations only if they outlast the wait.
SETTLING = ("missing_follow_up", "leaked_slot")


def settle(
    db: firestore.Client, user_ids: Sequence[str], timeout: float, settings: Settings
) -> tuple[list[UserDocuments], list[Violation], list[Violation]]:
    """The users' documents and their invariants once nothing is going on (no run active, no
    task live, no follow-up still to come, no run slot still held), or as they are after
    ``timeout`` seconds, with what was still going on then (``unsettled``)."""
    deadline = time.monotonic() + timeout
    while True:
        documents = [read_user(db, uid) for uid in user_ids]
        busy = [v for d in documents for v in pending(d)]
        checked = [v for d in documents for v in _settled_check(d, settings)]
        if not busy and not any(v.kind in SETTLING for v in checked):
            return documents, checked, []
        if time.monotonic() >= deadline:
            return documents, checked, busy
        time.sleep(POLL_SECONDS)


def settle_and_audit(
    db_client: firestore.Client,
    user_ids: Iterable[str],
    timeout: float,
    settings: Settings | None = None,
) -> list[Violation]:
    """Wait up to ``timeout`` seconds for the users to settle, then check every invariant
    (the settled ones included, and that every copy of a family message is the same in
    each of these users' subtrees); what is still going on at the end is a violation too."""
    settings = settings or Settings.from_env()
    users = sorted(set(user_ids))
    documents, checked, unsettled = settle(db_client, users, timeout, settings)
    others = family_check(db_client, users) + settings_check(db_client, users)
    others += progress_check(db_client, users)
    return unsettled + checked + shared_copies(documents) + others


def check_now(
    db_client: firestore.Client, user_ids: Iterable[str], settings: Settings
) -> list[Violation]:
    """The invariants that hold at any moment, and the leases, as the users are now."""
    now = datetime.now(UTC)
    check = Audit.of(settings, now=now)
    users = sorted(set(user_ids))
    documents = [read_user(db_client, uid) for uid in users]
    found = [v for d in documents for v in audit(d, check)]
    others = family_check(db_client, users) + settings_check(db_client, users)
    others += progress_check(db_client, users)
    return found + shared_copies(documents) + others


def report(violations: Sequence[Violation], users: int, out: Any = None) -> None:
    out = out or sys.stdout
    if not violations:
        print(f"{users} user(s) checked: no violations.", file=out)
        return
    for kind, found in grouped(violations).items():
        print(f"{kind} ({len(found)}):", file=out)
        for violation in found:
            print(f"  {violation.path}: {violation.detail}", file=out)
    print(f"{users} user(s) checked: {len(violations)} violation(s).", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.audit", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--project", help="the Firebase project (default: GOOGLE_CLOUD_PROJECT)")
    parser.add_argument("--user", action="append", default=[], help="a user id (repeatable)")
    parser.add_argument("--all-users", action="store_true", help="check every user")
    parser.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="first wait up to SECONDS for the users to settle, then check settled invariants",
    )
    parser.add_argument(
        "--grace",
        type=int,
        metavar="SECONDS",
        help="how long past its lease a run or task may be (default SPARK_WATCHDOG_GRACE_SECONDS)",
    )
    args = parser.parse_args(argv)
    if not args.user and not args.all_users:
        parser.error("name users with --user, or pass --all-users")
    env = dict(os.environ)
    if args.grace is not None:
        env["SPARK_WATCHDOG_GRACE_SECONDS"] = str(args.grace)
    settings = Settings.from_env(env)
    project = args.project or settings.project_id
    db = firestore.Client(project=project)
    try:
        users = sorted(set(args.user) | (set(all_users(db)) if args.all_users else set()))
        if args.wait is not None:
            violations = settle_and_audit(db, users, args.wait, settings)
        else:
            violations = check_now(db, users, settings)
    finally:
        db.close()  # type: ignore[no-untyped-call]
    report(violations, len(users))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
