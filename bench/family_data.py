"""What a family's data costs to read (issue 34), on the in-memory stores, through the
agent's own verbs (no emulator needed):

(a) ``GET .../families/{id}/progress`` for three members with 50 lessons each of ~200 k
    characters: the request's time, the event loop's longest pause meanwhile and the
    lessons parsed; then the same with no summaries stored (lessons from before them:
    the first request refills them off the loop, the next reads them);
(b) one member sending 1,500 messages of 32 KiB as fast as they go: how many are
    delivered, how many refused and the first ``Retry-After``;
(c) a file attached to the first of 1,500 such messages (sent 4 s apart, the bytes
    allowance lifted), looked up in the recipient's copy of 1,480 segments: segments
    read and time, for the file, for a path no message names, and once more after the
    index is taken away (segments from before it: the first lookup indexes them).

    .venv/bin/python bench/family_data.py [a] [b] [c]
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from PIL import Image  # noqa: E402

from shared.attachments.service import Requested  # noqa: E402
from shared.auth.base import User  # noqa: E402
from shared.clock import SystemClock  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.errors import RateLimited  # noqa: E402
from shared.families.messages import Target  # noqa: E402
from shared.ids import SequentialIds  # noqa: E402
from shared.lessons.grammar import parser  # noqa: E402
from shared.llm.scripted import ScriptedProvider  # noqa: E402
from shared.queue.memory import InMemoryTaskQueue  # noqa: E402
from shared.schemas.documents import ArchiveSegment, Lesson  # noqa: E402
from shared.store.files import InMemoryFileStore  # noqa: E402
from shared.store.memory import (  # noqa: E402
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.wiring import Components, assemble  # noqa: E402

MUM, DAD, KID = User(uid="mum", name="Mum"), User(uid="dad", name="Dad"), User(uid="kid")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Stalls:
    """The event loop's longest pause while it runs (a 1 ms ticker)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None
        self._going = True

    async def __aenter__(self) -> Stalls:
        self._task = asyncio.ensure_future(self._tick())
        await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._going = False
        assert self._task is not None
        await self._task

    async def _tick(self) -> None:
        last = time.perf_counter()
        while self._going:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last - 0.001)
            last = now


class Parses:
    """Counts every lesson parsed (each parse makes its parser in ``grammar.parser``)."""

    def __enter__(self) -> Parses:
        self.count = 0
        self._made = parser.create_parser

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return self._made(*args, **kwargs)

        parser.create_parser = counted  # type: ignore[assignment]
        return self

    def __exit__(self, *_: object) -> None:
        parser.create_parser = self._made  # type: ignore[assignment]


def build(**settings: Any) -> tuple[Components, InMemoryConversationStore, InMemoryFileStore]:
    store, files = InMemoryConversationStore(), InMemoryFileStore()
    components = assemble(
        replace(Settings(), **settings),
        store,
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
        InMemoryTaskQueue(),
        ScriptedProvider([]),
        SystemClock(),
        ids=SequentialIds(),
        system_prompt="",
        files=files,
    )
    return components, store, files


async def family(components: Components) -> str:
    families = components.agent.families
    made = await families.create(MUM, "Smiths")
    for user, role in ((DAD, "parent"), (KID, "dependent")):
        invite = await families.invite(MUM.uid, made.id, role)  # type: ignore[arg-type]
        await families.join(user, invite.token)
    return made.id


def big_body(n: int) -> str:
    unit = (
        '<p>Fill in: I <blank answer="am" student-answer="am"/> here and you '
        '<blank answer="are" student-answer=""/> there, said the teacher once more.</p>'
    )
    head = f'<lesson><h1>Lesson {n}</h1><exercise id="e1" type="fill-blanks">'
    tail = "</exercise></lesson>"
    return head + unit * ((199_000 - len(head) - len(tail)) // len(unit)) + tail


async def progress() -> None:
    components, _, _ = build()
    family_id = await family(components)
    agent = components.agent
    store = agent._lessons
    assert isinstance(store, InMemoryLessonStore)
    for user in (MUM, DAD, KID):
        for n in range(50):
            at = T0 + timedelta(minutes=n)
            made = Lesson(
                id=f"les_{n}", title=f"Lesson {n}", body=big_body(n), version=1,
                created_at=at, updated_at=at,
            )  # fmt: skip
            await store.create(user.uid, made)
    print(f"(a) 3 members x 50 lessons of {len(big_body(0)):,} characters")

    async def ask(label: str) -> None:
        with Parses() as parses:
            async with Stalls() as stalls:
                start = time.perf_counter()
                members = await agent.family_progress(DAD.uid, family_id)
                took = time.perf_counter() - start
        shown = sum(len(m.lessons) for m in members)
        print(
            f"(a) {label}: {took * 1000:,.0f} ms, the loop's longest pause "
            f"{stalls.worst * 1000:,.0f} ms, {parses.count} lessons parsed, {shown} shown"
        )

    await ask("progress")
    await ask("progress again")
    if hasattr(store, "_progress"):
        store._progress.clear()  # as if the lessons were written before the summaries
        await ask("progress, no summaries stored (refilled)")
        await ask("progress after the refill")


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (200, 10, 10)).save(out, "PNG")
    return out.getvalue()


async def flood(count: int = 1500) -> None:
    components, _, _ = build()
    await family(components)
    delivery = components.agent.delivery
    text, delivered, refused, first_wait = "x" * 32 * 1024, 0, 0, None
    start = time.perf_counter()
    for _ in range(count):
        try:
            await delivery.deliver(MUM.uid, text, Target(user_id=KID.uid))
            delivered += 1
        except RateLimited as exc:
            refused += 1
            first_wait = first_wait or exc.retry_after
    took = time.perf_counter() - start
    print(
        f"(b) {count} messages of 32 KiB in {took:.1f} s: {delivered} delivered, "
        f"{refused} refused (429), the first Retry-After {first_wait} s"
    )


class Stepping:
    """A clock 4 s further on at each reading: messages spread out over time."""

    def __init__(self) -> None:
        self.at = T0

    def now(self) -> datetime:
        self.at += timedelta(seconds=4)
        return self.at


async def lookup(count: int = 1500) -> None:
    lifted = {"family_message_bytes_per_hour": 10**12}
    fields = Settings.__dataclass_fields__
    components, store, files = build(**{k: v for k, v in lifted.items() if k in fields})
    await family(components)
    delivery = components.agent.delivery
    delivery._clock = Stepping()  # type: ignore[assignment]
    path = f"{MUM.uid}/uploads/upl_1/photo.png"
    await files.write(path, png(), "image/png")
    attached = [Requested(path, "image/png", len(png()))]
    sent = await delivery.deliver(MUM.uid, "Look", Target(user_id=KID.uid), attachments=attached)
    for _ in range(count - 1):
        await delivery.deliver(MUM.uid, "x" * 32 * 1024, Target(user_id=KID.uid))
    held = await store.get(KID.uid, sent.conversation_id)
    segments = held.archived.segments if held and held.archived else 0
    print(f"(c) the recipient's copy of {count} messages: {segments} segments")

    async def find(label: str, wanted: str) -> None:
        # Each segment read is validated once (``ArchiveSegment.model_validate``).
        validate, read = ArchiveSegment.model_validate, 0

        def counted(*args: Any, **kwargs: Any) -> ArchiveSegment:
            nonlocal read
            read += 1
            return validate(*args, **kwargs)

        ArchiveSegment.model_validate = counted  # type: ignore[method-assign]
        try:
            async with Stalls() as stalls:
                start = time.perf_counter()
                try:
                    await delivery.file(KID.uid, sent.conversation_id, wanted)
                    answer = "found"
                except Exception as exc:
                    answer = type(exc).__name__
                took = time.perf_counter() - start
        finally:
            ArchiveSegment.model_validate = validate  # type: ignore[method-assign]
        print(
            f"(c) {label}: {answer}, {took * 1000:,.0f} ms, the loop's longest pause "
            f"{stalls.worst * 1000:,.0f} ms, segments read {read}"
        )

    normalised, unknown = path + ".normalised.jpg", f"{MUM.uid}/uploads/upl_9/x.png"
    await find("the file", normalised)
    await find("a path no message names", unknown)
    if hasattr(store, "_files"):
        store._files.clear()  # as if archived before the index existed
        store._documents[(KID.uid, sent.conversation_id)]["archived"].pop("unindexed", None)
        await find("the file, segments from before the index (indexed now)", normalised)
        await find("the file again", normalised)


async def main(parts: list[str]) -> None:
    if "a" in parts:
        await progress()
    if "b" in parts:
        await flood()
    if "c" in parts:
        await lookup()


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("family_data"):
        asyncio.run(main(sys.argv[1:] or ["a", "b", "c"]))
