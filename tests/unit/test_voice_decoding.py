"""The api's side of bounded decoding (issue 34): a clip is decoded in a child process
whose limits end a decode that passes them (and which a cancelled request kills), the
refusals keep their HTTP answers (413, 415), the event loop goes on meanwhile, and at
most ``SPARK_VOICE_DECODES_AT_ONCE`` clips are decoded at once in a process. The
corpus itself, clip by clip: ``test_hostile_audio.py``.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.attachments import audio
from shared.attachments import voice as voice_module
from shared.attachments.audio import NotAudio, Sound, TooLong, probe
from shared.attachments.audio_worker import decode
from shared.attachments.voice import VoiceClips
from shared.config import ConfigurationError, Settings
from shared.llm.scripted import ScriptedProvider
from shared.llm.transcribe import FakeTranscriber
from tests.hostile_audio import clip
from tests.unit.helpers import Fakes, api_of, egress_of, make_service, serving
from tests.voice_samples import spoken

MESSAGES = "/api/spark/agent/messages"
SSE = {"Authorization": "Bearer alice-token", "Accept": "text/event-stream"}
ROOT = Path(__file__).resolve().parents[2]
HOURS = 4000.0
"""A ``max_seconds`` past ``webm-opus-1h``: it is heard to its end, not refused as long."""


def test_a_pcm_packet_is_judged_by_the_samples_it_will_make() -> None:
    audio._judge_packet(64_000, 0, 480.0, 2)  # a WAV block of 32,000 samples: fine
    with pytest.raises(NotAudio, match="a packet of 70000 samples"):
        audio._judge_packet(140_000 // 2, 0, 480.0, 1)
    with pytest.raises(NotAudio, match="bytes"):
        audio._judge_packet(audio.MAX_PACKET_BYTES + 1, 0, 480.0, 0)
    with pytest.raises(NotAudio, match="a frame of 70000 samples"):
        audio._judge_frame(70_000, 48_000, 1)


def test_id3_tags_in_front_of_an_mp3_are_skipped_unread() -> None:
    tag = b"ID3\x04\x00\x10\x00\x00\x00\x05" + b"12345" + b"3DI\x04\x00\x10\x00\x00\x00\x05"
    frames = b"\xff\xfb\x90\x00frames"
    assert bytes(audio._without_id3(memoryview(tag * 2 + frames))) == frames


# --- in a child process, as the api decodes ------------------------------------------------


async def test_a_clip_decoded_in_a_child_is_the_clip_decoded_here() -> None:
    data = spoken("audio/webm")
    assert await decode(data, 120) == probe(data, 120)
    behind_a_bomb = await decode(clip("mp3-id3-zlib-bomb"), 120)
    assert 1.9 < behind_a_bomb.duration_seconds < 2.1 and not behind_a_bomb.silent
    with pytest.raises(TooLong) as caught:
        await decode(clip("webm-opus-1h"), 5)
    assert 5 < caught.value.seconds < 6
    with pytest.raises(NotAudio, match="pcm_s16le"):
        await decode(clip("webm-pcm-1khz-2mb"), 120)


async def test_the_childs_limits_end_a_decode_that_passes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    long_wav = clip("wav-119s-48k-stereo")  # 3.8 MB of sound decoded: needs some room
    with pytest.raises(NotAudio, match="MemoryError"):
        await decode(long_wav, 120, memory_bytes=1024 * 1024)
    # Its CPU limits: an hour of sound heard out to its end costs about 8 s of CPU here,
    # past both the kernel's limit (what is left of the second the child started in) and
    # probe's own 1.5 s budget. Which of the two ends it first depends on the machine
    # (on a loaded one the kernel's SIGXCPU was seen to come late): each is shown alone,
    # the kernel's below, probe's in test_hostile_audio.py.
    with pytest.raises(NotAudio, match=rf"exit status -{signal.SIGXCPU.value}|s of CPU"):
        await decode(clip("webm-opus-1h"), HOURS, cpu_seconds=0)
    # Its wall-clock limit: the same hour cannot be heard within 0.2 s, and the child is
    # killed then, not waited for.
    started = _children(monkeypatch)
    with pytest.raises(NotAudio, match="not decoded within"):
        await decode(clip("webm-opus-1h"), HOURS, limit_seconds=0.2)
    assert started[0].returncode == -signal.SIGKILL


class _Children(list[asyncio.subprocess.Process]):
    """The child processes ``decode`` starts, as they start (``running`` set then)."""

    def __init__(self) -> None:
        super().__init__()
        self.running = asyncio.Event()


def test_the_childs_cpu_limit_ends_work_that_never_ends() -> None:
    # Endless work: the kernel's SIGXCPU comes however fast or loaded the machine.
    spin = "from shared.attachments.audio_worker import limit\nlimit(1 << 30, 0)\nwhile True: pass"
    ended = subprocess.run([sys.executable, "-c", spin], cwd=ROOT, timeout=120, check=False)
    assert ended.returncode == -signal.SIGXCPU


def _children(monkeypatch: pytest.MonkeyPatch) -> _Children:
    started = _Children()
    spawn = asyncio.create_subprocess_exec

    async def spawned(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await spawn(*args, **kwargs)
        started.append(process)
        started.running.set()
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawned)
    return started


async def test_a_cancelled_decode_kills_its_child(monkeypatch: pytest.MonkeyPatch) -> None:
    started = _children(monkeypatch)
    task = asyncio.create_task(decode(clip("webm-opus-1h"), HOURS))
    await started.running.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert started[0].returncode == -signal.SIGKILL  # killed and reaped


async def test_the_event_loop_goes_on_while_a_clip_is_decoded() -> None:
    # An hour of sound (8 s of CPU here): the loop turns a hundred times while the
    # child hears it, however fast the machine; a decode on the loop would have ended
    # (or failed) before the first turn.
    decoding = asyncio.create_task(decode(clip("webm-opus-1h"), HOURS))
    for _ in range(100):
        await asyncio.sleep(0)
    assert not decoding.done()
    decoding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await decoding


@pytest.mark.parametrize(
    ("name", "status", "code"),
    [
        ("webm-pcm-1khz-2mb", 415, "unsupported_media_type"),
        ("m4a-cmov-zlib-bomb", 415, "unsupported_media_type"),
        ("webm-opus-1h", 413, "payload_too_large"),
    ],
)
async def test_hostile_clips_keep_their_http_answers(name: str, status: int, code: str) -> None:
    fake = FakeTranscriber("hello")
    harness = make_service(
        ScriptedProvider([]), fakes=Fakes(), transcriber=fake, voice_max_seconds=5
    )
    path = f"alice/uploads/upl_h/{name}"
    await harness.fakes.files.write(path, clip(name), "application/octet-stream")
    async with serving(api_of(harness)) as client:
        response = await client.post(MESSAGES, headers=SSE, json={"voice": {"storagePath": path}})
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert fake.clips == []


async def test_voice_decodes_at_once_are_limited_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now, peak = [0], [0]

    async def slow(data: bytes, max_seconds: float) -> Sound:
        now[0] += 1
        peak[0] = max(peak[0], now[0])
        await asyncio.sleep(0.05)
        now[0] -= 1
        return Sound(1.0, -10.0, b"")

    monkeypatch.setattr(voice_module, "decode", slow)
    fakes = Fakes()
    egress = egress_of(ScriptedProvider([]), transcriber=FakeTranscriber())
    clips = VoiceClips(fakes.files, egress, 120, decodes_at_once=2)
    checked = []
    for n in range(5):
        path = f"alice/uploads/upl_{n}/clip.webm"
        await fakes.files.write(path, spoken("audio/webm"), "audio/webm")
        checked.append(await clips.check("alice", path))
    await asyncio.gather(*(clips.listen(c) for c in checked))
    assert peak[0] == 2


def test_settings_read_how_many_voice_clips_are_decoded_at_once() -> None:
    assert Settings().voice_decodes_at_once == 1
    assert Settings.from_env({"SPARK_VOICE_DECODES_AT_ONCE": "3"}).voice_decodes_at_once == 3
    with pytest.raises(ConfigurationError, match="SPARK_VOICE_DECODES_AT_ONCE"):
        Settings.from_env({"SPARK_VOICE_DECODES_AT_ONCE": "0"})
    harness = make_service(ScriptedProvider([]), voice_decodes_at_once=2)
    voice = harness.agent._runs._voice  # type: ignore[attr-defined]
    assert voice._decodes._value == 2  # the clips' own semaphore, not the attachments'
