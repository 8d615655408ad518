"""Firestore's document size limit, checked before writing, and the room kept under it
for the writes that close things."""

from __future__ import annotations

from shared.errors import ConversationTooLarge

# Firestore's limit is 1 MiB (1,048,576 bytes), measured as ``patch.stored_size`` does;
# a little headroom covers a write that adds to a field we size approximately.
MAX_DOCUMENT_BYTES = 1_040_000

# Writes that add new content to a conversation (a user's message, queued or not; a
# streamed reply; a tool's output) must leave this much free; the writes that close
# things (a run ending with its reply cut to a note, a stop, the watchdog closing a dead
# run, the short result saying an output did not fit) may use it. Without it a document
# filled to the byte by new content could never close its run again: every send, stop
# and watchdog answered 507 for ever (48 queued messages of 32 KB did it). Rolling
# messages over into the archive, or moving queued messages out, cannot promise room
# (the newest messages and the queue must stay live), so the room is kept instead.
# What a closing adds, measured: a dead run closed and the next queued message's run
# opened, 0.24 KB (0.37 KB cut to a note); a stop, 0.14 KB; a run ending with five task
# calls and their ``tasks`` entries, 1.8 KB; a "did not fit" result, 0.45 KB. 64 KiB (6%
# of the document) holds dozens of those: even a run's most task calls (5 a step, 10
# steps), each with its entry and its "did not fit" result (~0.8 KB), take ~40 KB.
CLOSING_RESERVE = 64 * 1024


def check_size(size: int, reserve: int = 0, before: int = 0) -> None:
    """Raise ``ConversationTooLarge`` if a document of ``size`` bytes would not fit; with
    ``reserve``, also if it grew (from ``before`` bytes) to leave less than that free."""
    limit = MAX_DOCUMENT_BYTES - reserve if size > before else MAX_DOCUMENT_BYTES
    if size > limit:
        raise ConversationTooLarge(
            f"This conversation is too long to continue ({size} bytes); please start a new one."
        )
