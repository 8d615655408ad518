"""Decoding a voice clip is bounded before the work is done (issue 34): every clip of
the hostile corpus (``tests/hostile_audio.py``: hours of PCM in one block, 8 Hz and
384 kHz, 64 channels, lying headers and lacing, zlib bombs in tags and headers, damaged
containers) is answered as expected, by the bound meant for it, each decoded by
``audio.probe`` in a process of its own whose peak RSS and CPU time are read there: at
most 64 MiB above its baseline (PyAV imported, the clip read) and 2 s of CPU.

Only ``probe`` and its two exceptions are used, so this runs on any version of it.
"""

from __future__ import annotations

import pytest

from shared.attachment_rules import MAX_BYTES, sniff
from tests.hostile_audio import CORPUS, Measured, clip, measure_all

PEAK_MIB = 64
CPU_SECONDS = 2.0
NAMES = [h.name for h in CORPUS]
EXPECTED = {h.name: h for h in CORPUS}


@pytest.fixture(scope="module")
def measured(request: pytest.FixtureRequest) -> dict[str, Measured]:
    """The clips the selected tests ask about (all, in a whole run), each decoded by
    ``audio.probe`` in a process of its own, one per CPU at a time."""
    wanted = {
        item.callspec.params["name"]
        for item in request.session.items
        if isinstance(item, pytest.Function) and "measured" in item.fixturenames
    }
    return measure_all({name: clip(name) for name in NAMES if name in wanted})


@pytest.mark.parametrize("name", NAMES)
def test_each_hostile_clip_passes_the_sniff_within_the_upload_limit(name: str) -> None:
    data = clip(name)
    assert len(data) <= MAX_BYTES
    assert sniff(data[:12]) is not None


@pytest.mark.parametrize("name", NAMES)
def test_each_hostile_clip_is_answered_as_expected_within_2_s_of_cpu(
    name: str, measured: dict[str, Measured]
) -> None:
    got, expected = measured[name], EXPECTED[name]
    assert got.cpu_seconds <= CPU_SECONDS, got
    if expected.why.endswith("s of CPU") and got.outcome == "Sound":
        # Its whole decode costs about the CPU bound itself, more or less from one run
        # to the next (bench/audio_decode.py prints it): heard out within it is the
        # bound holding too. That the bound refuses is shown below on a bound it
        # cannot meet.
        return
    assert got.outcome == expected.expect, got
    assert expected.why in got.detail, got  # refused by the bound meant to refuse it


def test_decoding_past_its_cpu_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.attachments import audio

    monkeypatch.setattr(audio, "CPU_SECONDS", 0.05)
    with pytest.raises(audio.NotAudio, match=r"decoding took more than 0\.05 s of CPU"):
        audio.probe(clip("webm-opus-8ch-119s"), 120.0)


@pytest.mark.parametrize("name", NAMES)
def test_each_hostile_clip_decodes_within_64_mib_of_its_baseline(
    name: str, measured: dict[str, Measured]
) -> None:
    got = measured[name]
    assert got.peak_mb <= PEAK_MIB, got
