"""What an instance imports before its first request (issue 25, cold start;
``bench/cold_start.py`` measures it): only what a text message needs. A voice clip's
decoder is imported with the first clip; what every first request would otherwise
import lazily on its own time is imported with ``main``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def modules_after_import_main(target: str) -> set[str]:
    """The modules a fresh process holds once ``import main`` (as ``target``) returns."""
    return set(after_import_main(target, "sorted(sys.modules)"))


def after_import_main(target: str, expression: str) -> object:
    """``expression`` (as JSON) in a fresh process once ``import main`` (as ``target``)
    returns (``before``: each generation's collections until then): emulator addresses
    that nothing listens on, since importing connects to nothing."""
    env = {
        **os.environ,
        "FUNCTION_TARGET": target,
        "GCLOUD_PROJECT": "demo-cold-start",
        "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9",
        "FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:9",
        "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9",
        "OPENAI_API_KEY": "k",
        "SPARK_TASKS_URL": "http://127.0.0.1:9/",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'functions'}",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import gc, json, sys; before = [g['collections'] for g in gc.get_stats()]; "
            f"import main; print(json.dumps({expression}))",
        ],
        cwd=ROOT / "functions",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module", params=["api", "tasks"])
def imported(request: pytest.FixtureRequest) -> set[str]:
    return modules_after_import_main(request.param)


def test_start_up_is_frozen_out_of_the_collectors_walks() -> None:
    # (main.py says why: ~7 % of the api's CPU under 150 streams went to the collector.)
    expression = (
        "[gc.get_freeze_count(), gc.get_threshold(), gc.isenabled(),"
        " [g['collections'] - n for g, n in zip(gc.get_stats(), before)]]"
    )
    found = after_import_main("api", expression)
    assert isinstance(found, list)
    frozen, threshold, enabled, collections = found
    assert frozen > 50_000 and threshold == [50_000, 20, 10]
    # Nothing collected while importing (~245 collections otherwise; one may come while
    # main.py itself is compiled, before its first line runs), and enabled again once
    # start-up was frozen.
    assert enabled and collections[0] <= 1 and collections[1:] == [0, 0]


def test_the_voice_decoder_waits_for_the_first_voice_clip(imported: set[str]) -> None:
    # PyAV: ~35 ms of `import main` (`python -X importtime`), used by voice clips alone.
    assert "av" not in imported


def test_what_every_first_request_needs_is_imported_before_it(imported: set[str]) -> None:
    # anyio loads its asyncio back-end on first use (Starlette's response):
    # ~60 ms of the first request (py-spy, cProfile), paid by none after it.
    assert "anyio._backends._asyncio" in imported


def test_what_the_server_worker_imports_after_the_port_is_bound_is_imported_before(
    imported: set[str],
) -> None:
    # functions-framework serves through gunicorn: its worker is forked once the port is
    # bound and then imports uvicorn's loop and protocols (~45 ms, `python -X importtime`
    # on the server) while the first request waits; imported with main, it inherits them.
    assert {"uvicorn.protocols.http.auto", "uvicorn.protocols.websockets.auto"} <= imported
    assert "uvloop" in imported


def test_the_openai_sdk_waits_for_the_first_audio_request(imported: set[str]) -> None:
    # The chat request goes through wire: `import openai` (~0.35 s, `python -X
    # importtime`) and httpx2 with httpcore2 and h2 (~0.16 s) are for audio alone.
    assert not {"openai", "httpx2", "httpcore2"} & imported


def test_the_openai_sdk_clients_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each context loads the system's trust store (~60-90 ms of CPU here); a process
    # configured for OpenAI has three SDK clients (transcription, live audio, speech),
    # made when first used, and wire's connections use the same context.
    import ssl

    import httpcore2
    import openai  # noqa: F401 (imported first: see below)

    from shared.llm.openai import connect_client
    from shared.llm.wire.pool import tls_context

    # Importing the SDK is not making a client: with the development group installed it
    # imports aiohttp (its optional backend), which makes contexts of its own at import.
    made: list[object] = []
    real = ssl.create_default_context

    def counted(*args: object, **kwargs: object) -> ssl.SSLContext:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]  # type: ignore[return-value]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    tls_context.cache_clear()
    clients = [connect_client("k", None, 2) for _ in range(3)]
    assert not made  # nothing made before a client is first used
    for client in clients:
        assert client.sdk is client.sdk
    assert made == [tls_context()]


def test_the_gemini_sdk_clients_share_the_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    # genai would make two of its own per client (its sync client's, its websockets').
    # (Imported before the count, as the OpenAI SDK above.)
    import ssl

    import httpcore2

    from shared.clock import SystemClock
    from shared.llm.gemini import GeminiTranscriber
    from shared.llm.wire.pool import tls_context
    from shared.voice.gemini_voice import GeminiVoice

    made: list[object] = []
    real = ssl.create_default_context

    def counted(*args: object, **kwargs: object) -> ssl.SSLContext:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]  # type: ignore[return-value]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    monkeypatch.setattr(httpcore2, "default_ssl_context", counted)
    tls_context.cache_clear()
    GeminiTranscriber.connect("gemini-2.5-flash", "k", None)
    GeminiVoice.connect("k", None, SystemClock(), "live", "tts")
    assert made == [tls_context()]
