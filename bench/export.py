"""What a person's export costs in memory (issue 49, DESIGN §15), on the in-memory
stores, through the api's own app (no emulator needed).

An account of 10,000 messages (20 conversations of 500, each with four archive
segments of 100 and 100 messages live), 200 uploaded files of 200 KB, 20 lessons with
two kept versions each and 50 task sections is exported through
``GET /api/spark/me/export``, the zip's chunks written to a file as a server would
send them; beside it, an account of one message and one file. For each: the most
memory the export allocated at once (``tracemalloc``'s peak, above what was allocated
before it began: the stores' own data), the zip's size and the time it took (traced:
slower than untraced). The zip is opened afterwards and every member's checksum checked.

    .venv/bin/python bench/export.py
"""

from __future__ import annotations

import asyncio
import gc
import random
import sys
import tempfile
import time
import tracemalloc
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from spark_http.app import ApiApp  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import StreamingResponse  # noqa: E402

from shared.auth.base import StaticTokenVerifier, User  # noqa: E402
from shared.clock import SystemClock  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.ids import SequentialIds  # noqa: E402
from shared.llm.scripted import ScriptedProvider  # noqa: E402
from shared.queue.memory import InMemoryTaskQueue  # noqa: E402
from shared.schemas.documents import (  # noqa: E402
    ArchiveMarker,
    ArchiveSegment,
    ContentPart,
    Conversation,
    Lesson,
    Message,
    TaskDocument,
)
from shared.store.files import InMemoryFileStore  # noqa: E402
from shared.store.memory import (  # noqa: E402
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.wiring import assemble  # noqa: E402

ME = User(uid="teacher", name="A teacher")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
MB = 1024 * 1024
WORDS = "The tide comes in twice a day because the Moon pulls the sea towards it. "


def message(n: int) -> Message:
    return Message(
        id=f"m{n:06d}",
        role="user" if n % 2 == 0 else "assistant",
        created_at=T0 + timedelta(seconds=n),
        status="complete",
        content=[ContentPart.of_text(f"{n}: " + WORDS * 6)],
    )


async def conversation(store: InMemoryConversationStore, c: int, segments: int, live: int) -> None:
    """One conversation: ``segments`` archive segments of 100 messages, ``live`` more."""
    cid, archived = f"conv_{c:03d}", segments * 100
    marker = (
        ArchiveMarker(count=archived, newest_id=f"m{archived - 1:06d}", segments=segments)
        if archived
        else None
    )
    # The conversation first: a segment is archived only beside one that exists.
    await store.create(
        ME.uid,
        Conversation(
            id=cid,
            participant_ids=[ME.uid],
            title=f"Conversation {c}",
            created_at=T0,
            updated_at=T0,
            last_message_at=T0,
            messages=[message(archived + i) for i in range(live)],
            archived=marker,
        ),
    )
    for number in range(1, segments + 1):
        first = (number - 1) * 100
        moved = [message(first + i) for i in range(100)]
        segment = ArchiveSegment(conversation_id=cid, segment=number, messages=moved, created_at=T0)
        await store.archive(ME.uid, segment)


async def account(conversations: int, segments: int, live: int, files: int, lessons: int) -> ApiApp:
    """The api of a process whose stores hold one account of this size."""
    store, ledger, kept = (
        InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
    )
    uploads = InMemoryFileStore()
    components = assemble(
        Settings(),
        store,
        ledger,
        kept,
        InMemoryTaskQueue(),
        ScriptedProvider([]),
        SystemClock(),
        ids=SequentialIds(),
        system_prompt="You are Spark AI Agent.",
        files=uploads,
        titles=False,  # (no title calls: the model is scripted)
    )
    for c in range(conversations):
        await conversation(store, c, segments, live)
    for f in range(files):
        data = random.randbytes(200 * 1024)  # a photo's bytes: they do not shrink
        await uploads.write(f"{ME.uid}/uploads/u{f:04d}/photo.jpg", data, "image/jpeg")
    for n in range(lessons):
        body = "<lesson><title>Tides</title><p>" + WORDS * 40 + "</p></lesson>"
        first = Lesson(
            id=f"les_{n}", title="Tides", body=body, version=1, created_at=T0, updated_at=T0
        )
        await kept.create(ME.uid, first)
        for version in (2, 3):
            await kept.replace(ME.uid, first.model_copy(update={"version": version}), version - 1)
    sections = {
        f"task_{n}": TaskDocument(
            id=f"task_{n}",
            conversation_id="conv_000",
            tool_call_id=f"call_{n}",
            tool="create_lesson",
            title="Writing a lesson",
            status="completed",
            created_at=T0,
            updated_at=T0,
            summary="Created “Tides”.",
        )
        for n in range(50 if lessons else 0)
    }
    ledger.sections.put(ME.uid, sections)
    return ApiApp(components.agent, StaticTokenVerifier({"token": ME}), Settings())


async def export(api: ApiApp, into: Path) -> tuple[int, int, float]:
    """The export streamed into ``into``: the peak allocated meanwhile, its size, its
    time."""
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/spark/me/export",
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer token")],
    }
    gc.collect()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        response = await api(Request(scope))
        assert isinstance(response, StreamingResponse), response.body
        size = 0
        with into.open("wb") as sink:
            async for chunk in response.body_iterator:
                sink.write(chunk)
                size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.perf_counter() - started
    with zipfile.ZipFile(into) as opened:
        assert opened.testzip() is None
    return peak, size, took


# Accounts of one conversation, a tenth of the full size and all of it, each conversation
# of 500 messages: (conversations, files, lessons).
SIZES = ((1, 2, 2), (2, 20, 2), (20, 200, 20))


async def main() -> None:
    print("export through GET /api/spark/me/export (in-memory stores, traced)")
    print(f"  {'account':<44} {'peak above baseline':>20} {'zip':>9} {'time':>7}")
    peaks: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        for conversations, files, lessons in SIZES:
            segments, live = 4, 100
            api = await account(conversations, segments, live, files, lessons)
            peak, size, took = await export(api, Path(folder) / f"{files}.zip")
            peaks.append(peak)
            messages = conversations * (segments * 100 + live)
            label = f"{messages:,} messages, {files} files of 200 KB, {lessons} lessons"
            print(f"  {label:<44} {peak / MB:>17.2f} MB {size / MB:>6.1f} MB {took:>5.1f} s")
            del api
    tenth, full = peaks[1], peaks[2]
    bounded = full < 1.5 * tenth and full < 8 * MB
    print(
        f"  10,000 messages and 200 files: {full / MB:.2f} MB against {tenth / MB:.2f} MB for a "
        f"tenth of the account (bounded, within 1.5x and under 8 MB: {bounded})"
    )


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("export"):
        asyncio.run(main())
