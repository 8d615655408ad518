"""An answer's body as it arrives, decoded when it came ``gzip`` or ``deflate``
encoded."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator

from shared.llm.wire.connection import Connection
from shared.llm.wire.errors import WireTransportError


class _Decoder:
    """A ``gzip`` or ``deflate`` body decoded piece by piece (``deflate`` as zlib's
    container or, as some servers send it, raw)."""

    def __init__(self, coding: str) -> None:
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise WireTransportError(f"an answer in an encoding never asked for: {coding}")
        self._deflate = coding == "deflate"
        self._inflate = zlib.decompressobj(47 if not self._deflate else 15)
        self._started = False

    def decode(self, data: bytes) -> bytes:
        try:
            if self._deflate and not self._started:
                self._started = True
                try:
                    return self._inflate.decompress(data)
                except zlib.error:
                    self._inflate = zlib.decompressobj(-15)
            return self._inflate.decompress(data)
        except zlib.error as exc:
            raise WireTransportError(f"a body that does not decode: {exc}") from exc

    def flush(self) -> bytes:
        return self._inflate.flush()


async def decoded(connection: Connection) -> AsyncIterator[bytes]:
    """The body of ``connection``'s answer as it arrives, decoded if it came encoded."""
    coding = connection.headers.get("content-encoding", "identity").strip().lower()
    if coding == "identity":
        while (chunk := await connection.next_chunk()) is not None:
            yield chunk
        return
    decoder = _Decoder(coding)
    while (chunk := await connection.next_chunk()) is not None:
        if data := decoder.decode(chunk):
            yield data
    if tail := decoder.flush():
        yield tail


async def read_body(connection: Connection, limit: int) -> bytes:
    """The rest of the answer's body, decoded, at most ``limit`` bytes of it."""
    parts: list[bytes] = []
    size = 0
    async for chunk in decoded(connection):
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]
