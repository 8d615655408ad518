"""What an AI SDK chat's body costs the api at its limits, and what it costs other streams.

    .venv/bin/python bench/chat_memory.py

Each case runs against a fresh api process on loopback (uvicorn, the real app, on the
in-package fakes and the offline model; files written to a temporary folder, as Cloud
Storage would hold them outside the process). Prints, for each, the api's peak memory
above its baseline (``VmHWM`` of ``/proc/<pid>/status`` after the case, less the same
after a warm-up chat) and the answer it gave:

* one 32 MiB body of each hostile shape, its junk in a field the route ignores: nesting
  past the limit, many small elements, many parts in a message, one huge string; and a
  body of 32 MiB of ignored strings under the value cap, read to its end and answered;
* six 25 MB PDFs at once, each as the ``data:`` URL of a chat's file part (33 MB
  bodies), within ``SPARK_CHAT_BODY_BUDGET_BYTES``: the others wait, then are refused
  (503) past ``SPARK_CHAT_BODY_WAIT_SECONDS``;
* other streams' p99 gap (time between SSE reads of four ordinary chats streaming at once,
  the offline model pacing its words 15 ms apart) while the whole-read 32 MiB body is
  parsed, beside the same streams without it.

The bound (issue 54): each case within 256 MiB of the api's 512 MiB.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

MIB = 1024 * 1024
TARGET_MIB = 256
STREAMS = 4
CHAT = "/api/spark/agent/chat"


# --- the api process --------------------------------------------------------------------


def serve(port: int, files: str) -> None:
    """The api on fakes, on ``port``; users ``u0``..``u9`` sign in with their uid."""
    import uvicorn
    from functions_framework.aio import create_asgi_app
    from spark_http.app import ApiApp

    from shared.auth.base import StaticTokenVerifier, User
    from shared.clock import SystemClock
    from shared.llm.offline import OfflineProvider
    from tests.unit.helpers import Fakes, make_service

    fakes = Fakes(files=_disk_store(Path(files)))
    harness = make_service(OfflineProvider(SystemClock(), token_delay=0.015), fakes=fakes)
    users = {f"u{n}": User(uid=f"u{n}") for n in range(10)}
    api = ApiApp(harness.agent, StaticTokenVerifier(users), harness.settings)
    app = create_asgi_app(target="api", source=str(ROOT / "tests" / "unit" / "ff_target.py"))
    sys.modules["ff_target"].current = api  # type: ignore[attr-defined]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    uvicorn.Server(config).run()


def _disk_store(folder: Path) -> object:
    from shared.errors import NotFound
    from shared.store.files import FileInfo, InMemoryFileStore, too_large

    class DiskFileStore(InMemoryFileStore):
        """Files kept on disk, outside the process (as Cloud Storage keeps them)."""

        def _path(self, path: str) -> Path:
            return folder / path.replace("/", "__")

        async def write(self, path: str, data: bytes, content_type: str) -> FileInfo:
            self._path(path).write_bytes(data)
            (folder / (self._path(path).name + ".type")).write_text(content_type)
            return FileInfo(path, content_type, len(data))

        async def stat(self, path: str) -> FileInfo | None:
            found = self._path(path)
            if not found.exists():
                return None
            kind = (folder / (found.name + ".type")).read_text()
            return FileInfo(path, kind, found.stat().st_size)

        async def _data(self, path: str) -> bytes:
            if not self._path(path).exists():
                raise NotFound(f"There is no file at {path!r}.")
            return self._path(path).read_bytes()

        async def read(self, path: str, max_bytes: int) -> bytes:
            data = await self._data(path)
            if len(data) > max_bytes:
                raise too_large(path, max_bytes)
            return data

    return DiskFileStore()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise SystemExit("no VmHWM")


class Api:
    """A fresh api process for one case."""

    def __enter__(self) -> Api:
        self.port = free_port()
        self._files = tempfile.TemporaryDirectory(prefix="bench-chat-files-")
        argv = [sys.executable, __file__, "--serve", str(self.port), self._files.name]
        env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'functions'}"}
        self.process = subprocess.Popen(argv, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise SystemExit("the api did not listen")

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        self.process.wait(10)
        self._files.cleanup()

    @property
    def peak_mib(self) -> float:
        return peak_kib(self.process.pid) / 1024


# --- the client ---------------------------------------------------------------------------


async def post(port: int, user: str, body: bytes, times: list[float] | None = None) -> int:
    """POST ``body`` to the chat route as ``user``; its status (the whole reply read;
    ``times``: when each read of the reply arrived)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=4 * MIB)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {user}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()

    async def send() -> None:
        try:
            writer.write(head)
            for at in range(0, len(body), MIB):
                writer.write(body[at : at + MIB])
                await writer.drain()
        except (ConnectionError, OSError):
            pass  # refused before the body was read: the answer says why

    sending = asyncio.ensure_future(send())
    reply = b""
    try:
        while chunk := await reader.read(65536):
            if times is not None:
                times.append(time.perf_counter())
            reply += chunk
    except ConnectionError:
        pass  # answered, then closed with the body unread: the answer may be lost
    sending.cancel()
    writer.close()
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0


def message(text: str, conversation: str, **extra: object) -> dict[str, object]:
    parts = [{"type": "text", "text": text}]
    user = {"id": "m1", "role": "user", "parts": parts}
    return {"id": conversation, "messages": [user], **extra}


def shaped(junk_items: bytes, size: int) -> bytes:
    head = json.dumps(message("Hello", "conv_big")).encode()
    count = (size - len(head) - 20) // (len(junk_items) + 1)
    return head[:-1] + b', "junk": [' + b",".join([junk_items] * count) + b"]}"


def hostile(size: int) -> dict[str, bytes]:
    head = json.dumps(message("Hello", "conv_big")).encode()
    depth = (size - len(head) - 20) // 2
    parts = b",".join([b'{"type": "step-start"}'] * ((size - 200) // 23))
    string = b'"' + b"x" * (size - len(head) - 20) + b'"'
    return {
        "deep nesting": head[:-1] + b', "junk": ' + b"[" * depth + b"]" * depth + b"}",
        "many small elements": shaped(b"0", size),
        "many parts": b'{"id": "conv_big", "messages": [{"id": "m1", "role": "user", "parts": ['
        + parts
        + b"]}]}",
        "one huge string": head[:-1] + b', "junk": ' + string + b"}",
        "ignored strings, read whole": shaped(b'"' + b"x" * 40 + b'"', size),
    }


def big_pdf(size: int) -> bytes:
    """A valid one-page PDF of ``size`` bytes: the rest is a stream no page uses."""
    pad = b"0" * (size - 700)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Length 36 >>\nstream\nBT /F1 18 Tf 72 720 Td (Tides) Tj ET\nendstream",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(pad), pad),
    ]
    from tests.samples import pdf_of

    return pdf_of(objects)


def with_file(pdf: bytes, conversation: str) -> bytes:
    url = "data:application/pdf;base64," + base64.b64encode(pdf).decode()
    body = message("What is in this file?", conversation)
    body["messages"][0]["parts"].insert(  # type: ignore[index]
        0, {"type": "file", "mediaType": "application/pdf", "url": url, "filename": "big.pdf"}
    )
    return json.dumps(body).encode()


async def ordinary(port: int, user: str, until: asyncio.Event, gaps: list[float]) -> None:
    """Chats one after another as ``user`` until ``until``, each reply's read gaps kept."""
    n = 0
    while not until.is_set():
        times: list[float] = []
        body = json.dumps(message("Hello there", f"conv_{user}_{n}")).encode()
        await post(port, user, body, times)
        gaps.extend(b - a for a, b in itertools.pairwise(times[1:]))
        n += 1


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 2 else float("nan")


async def streams_gap(port: int, big: bytes | None) -> tuple[float, int]:
    """Other streams' p99 gap (ms) while ``big`` is posted (or for 3 s without), and its
    status."""
    stop, gaps = asyncio.Event(), list[float]()
    others = [asyncio.ensure_future(ordinary(port, f"u{n}", stop, gaps)) for n in range(STREAMS)]
    await asyncio.sleep(1)
    gaps.clear()
    status = 0
    if big is None:
        await asyncio.sleep(3)
    else:
        status = await post(port, "u9", big)
    stop.set()
    await asyncio.gather(*others)
    return p99(gaps) * 1000, status


async def warm(port: int) -> None:
    assert await post(port, "u8", json.dumps(message("Hello", "conv_warm")).encode()) == 200


def case(name: str, work: object) -> float:
    with Api() as api:
        asyncio.run(warm(api.port))
        baseline = api.peak_mib
        answer = asyncio.run(work(api.port))  # type: ignore[operator]
        grown = api.peak_mib - baseline
    met = "within" if grown <= TARGET_MIB else "NOT within"
    print(f"  {name:<34} {grown:7.1f} MiB above {baseline:5.1f} MiB  | {answer}  ({met})")
    return grown


def main() -> None:
    size = 32 * MIB - 1024
    if sys.argv[1:2] == ["--gap"]:
        return gap(size)
    print(f"Peak memory of the api above its baseline (within {TARGET_MIB} MiB each):")
    worst = 0.0
    for name, body in hostile(size).items():

        async def one(port: int, body: bytes = body) -> str:
            return f"status {await post(port, 'u9', body)}"

        worst = max(worst, case(f"32 MiB, {name}", one))
    pdfs = [with_file(big_pdf(25_000_000 - 1000), f"conv_pdf_{n}") for n in range(6)]
    print(f"  (each PDF's body: {len(pdfs[0]) / MIB:.1f} MiB)")

    async def six(port: int) -> str:
        statuses = await asyncio.gather(*(post(port, f"u{n}", b) for n, b in enumerate(pdfs)))
        return "statuses " + " ".join(str(s) for s in statuses)

    worst = max(worst, case("six 25 MB PDFs at once", six))
    within = worst <= TARGET_MIB
    print(f"  worst case: {worst:.0f} MiB above baseline (within {TARGET_MIB} MiB: {within})")
    gap(size)


def gap(size: int) -> None:
    print(f"Other streams' p99 gap ({STREAMS} ordinary chats streaming at once):")
    whole = hostile(size)["ignored strings, read whole"]
    with Api() as api:
        asyncio.run(warm(api.port))
        without, _ = asyncio.run(streams_gap(api.port, None))
        during, status = asyncio.run(streams_gap(api.port, whole))
    print(f"  without a big body {without:6.1f} ms | while 32 MiB is parsed {during:6.1f} ms ")
    print(f"  (the big body: status {status})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]), sys.argv[3])
    else:
        from bench.results import recorded

        with recorded("chat_memory"):
            main()
