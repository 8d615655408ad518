"""The writes and task calls a reply costs, as docs/operations/costs.md states them (counted by
bench/conversation_cost.py's harness on the real agent with in-memory stores)."""

from __future__ import annotations

import math

from bench.conversation_cost import conversation
from shared.config import Settings

REPLIES = 3
SECONDS = 0.6


def streaming_bound(seconds: float) -> int:
    """Streaming writes of one message: at most one per SPARK_THROTTLE_MS."""
    return math.ceil(seconds * 1000 / Settings().throttle_ms)


async def test_cost_of_streamed_replies() -> None:
    counts = await conversation(REPLIES, SECONDS, background=False)
    # Each reply: the write that opens it (with the user's message), its throttled
    # streaming writes, and the final write.
    writes = counts["conversation writes"]
    assert isinstance(writes, int)
    assert 2 * REPLIES < writes <= REPLIES * (2 + streaming_bound(SECONDS))
    # The per-user run slot taken and freed, and the one model step's tokens reserved
    # before it and settled after (DESIGN §13: every model call is metered).
    assert counts["ledger writes"] == 4 * REPLIES
    # One watchdog per run, which finds the run closed and does nothing.
    assert counts["task calls"] == {"watchdog": REPLIES}


async def test_cost_of_background_replies_adds_a_claim_and_a_task() -> None:
    streamed = await conversation(REPLIES, SECONDS, background=False)
    background = await conversation(REPLIES, SECONDS, background=True)
    assert isinstance(streamed["conversation writes"], int)
    assert isinstance(background["conversation writes"], int)
    extra = background["conversation writes"] - streamed["conversation writes"]
    assert REPLIES - 1 <= extra <= REPLIES + 1  # the task claims the queued run: one write
    assert background["ledger writes"] == 4 * REPLIES
    assert background["task calls"] == {"watchdog": REPLIES, "reply": REPLIES}
