"""``make dev`` as a newcomer meets it (issue 26): a second one refuses before it prints
or touches anything, naming the port; ``tools.stack token`` without a stack says so
plainly; the data it keeps is imported only when there is some; ``make help`` lists
every target on one line."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tools import dev
from tools.keep import Keep
from tools.stack import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def held_port() -> object:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_second_make_dev_refuses_before_printing_or_touching_anything(
    held_port: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ports = {"firestore": free_port(), "auth": free_port(), "api": held_port}
    monkeypatch.setattr(dev, "dev_ports", lambda: ports)
    monkeypatch.setattr(dev, "STATE_DIR", tmp_path / ".stack")
    monkeypatch.delenv("SPARK_MODEL", raising=False)
    assert dev.dev() == 1
    out, err = capsys.readouterr()
    assert out == ""  # no banner, no token
    assert f"port {held_port} (the api function; PORT moves it) is already in use" in err
    assert "Another `make dev` may be running" in err and "Nothing was started" in err
    assert not (tmp_path / ".stack").exists()  # the first stack's logs are untouched


def test_make_dev_names_every_port_taken(held_port: int) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        second = other.getsockname()[1]
        refused = dev.refusal({"firestore": held_port, "auth": second, "tasks": free_port()})
    assert refused is not None
    assert f"ports {held_port} (the Firestore emulator) and {second} (the Auth emulator) are" in (
        refused
    )


def test_make_dev_refuses_a_spark_model_that_names_no_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPARK_MODEL", "antropic:claude-sonnet-4-5")
    refused = dev.refusal({"api": free_port()})
    assert refused is not None and "'antropic'" in refused and "anthropic:" in refused


def test_a_token_without_a_stack_says_the_stack_is_not_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(dev, "firebase_ports", lambda: {"auth": free_port()})
    assert dev.token() == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "The local stack is not running; start it with `make dev`." in err
    assert "Traceback" not in err and "URLError" not in err


def test_kept_data_is_imported_only_once_there_is_some(tmp_path: Path) -> None:
    keep = Keep(tmp_path / "data", "demo-spark")
    assert keep.firestore_flags() == [] and keep.auth_flags() == []
    export = keep.firestore / "spark"
    export.mkdir(parents=True)
    (export / "spark.overall_export_metadata").write_bytes(b"")
    keep.auth.mkdir(parents=True)
    (keep.auth / "firebase-export-metadata.json").write_text("{}")
    assert keep.firestore_flags() == [f"--import-data={export / 'spark.overall_export_metadata'}"]
    assert keep.auth_flags() == ["--import", str(keep.auth)]
    assert keep.storage_env() == {"STORAGE_BASE": str(keep.root), "STORAGE_DIR": "storage"}
    assert keep.reset() and not keep.root.exists() and not keep.reset()


def test_a_failed_save_keeps_the_last_saved_data(tmp_path: Path) -> None:
    keep = Keep(tmp_path / "data", "demo-spark")
    (keep.firestore / "spark").mkdir(parents=True)
    nobody = f"127.0.0.1:{free_port()}"
    failed = keep.save(nobody, nobody)
    assert [f.split(" ")[0] for f in failed] == ["Firestore", "Auth"]
    assert (keep.firestore / "spark").is_dir()
    assert sorted(p.name for p in keep.root.iterdir()) == ["firestore"]  # no half export


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_lists_every_target_on_one_line() -> None:
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY: (.+)$", makefile, re.M)
    assert phony is not None
    targets = phony[1].split()
    result = subprocess.run(
        ["make", "--no-print-directory", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    lines = result.stdout.splitlines()
    listed = [line.split()[1] for line in lines]
    assert listed == targets  # each once, in the Makefile's order
    assert all(len(line.split(None, 2)) == 3 for line in lines)  # and what it does
