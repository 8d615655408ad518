"""``EspeakVoice``: replies read aloud on this machine by espeak-ng (Debian's; ``make
setup`` installs it), for ``make dev`` with no provider key (docs/voice.md, "Offline
voice"). It speaks plainly and robotically, but it is there on a new machine, costs
milliseconds, and needs no model.

espeak-ng reads the text from its stdin (never its arguments: a reply starting with
``-`` is words, not an option) and writes a WAV to its stdout as it speaks, which is
passed on chunk by chunk. Its header cannot know the length, so it declares the
longest (browsers play such a stream to its end). The egress bounds the text and the
time (``Bound``); the audio is bounded here, below what the speech cache reads back.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator

from shared.errors import ProviderUnavailable

VOICE = "en-gb"
"""espeak-ng's British English voice: the product speaks UK English."""
MAX_AUDIO_BYTES = 32 * 1024 * 1024
"""The most audio one reply makes (about 12 minutes at 22.05 kHz, 16-bit mono): a
reply is never that long, and the speech cache reads back at most twice this."""
CHUNK_BYTES = 64 * 1024
_FAILED = "Reading aloud failed here; please try again."


class EspeakVoice:
    """Speaks with the ``espeak-ng`` found at ``program``, in ``voice``."""

    media_type = "audio/wav"

    def __init__(self, program: str = "espeak-ng", voice: str = VOICE) -> None:
        self._program = program
        self._voice = voice

    @classmethod
    def find(cls) -> EspeakVoice | None:
        """The speaker, if espeak-ng is installed."""
        found = shutil.which("espeak-ng")
        return None if found is None else cls(found)

    @property
    def voice_key(self) -> str:
        return f"local:espeak-ng:{self._voice}"

    async def speak(self, text: str) -> AsyncIterator[bytes]:
        try:
            process = await asyncio.create_subprocess_exec(
                self._program,
                "-v",
                self._voice,
                "--stdin",
                "--stdout",
                env={"LC_ALL": "C.UTF-8"},  # none of the api's secrets
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError:  # uninstalled since it was found
            raise ProviderUnavailable(_FAILED) from None
        assert process.stdin is not None and process.stdout is not None
        stdin = process.stdin

        async def feed() -> None:
            # Beside the reading: espeak-ng speaks while it reads, and a long text would
            # fill both pipes if it were written first.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.write(text.encode())
                await stdin.drain()
                stdin.close()

        feeding = asyncio.create_task(feed())
        made = 0
        try:
            while made < MAX_AUDIO_BYTES and (
                chunk := await process.stdout.read(min(CHUNK_BYTES, MAX_AUDIO_BYTES - made))
            ):
                made += len(chunk)
                yield chunk
            if made < MAX_AUDIO_BYTES and (await process.wait() != 0 or not made):
                raise ProviderUnavailable(_FAILED)
        finally:
            feeding.cancel()
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            await process.wait()
