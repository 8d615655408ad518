"""``make dev`` keeps its data between runs (``tools/keep.py``): the test user keeps its
uid, Firestore its documents and Storage its files when the stack stops and starts
again. The emulators here are this test's own, on free ports, with their data kept in
a temporary folder (``make dev``'s is ``.stack/data/``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from google.cloud import firestore

from shared.store.cloudstorage import connect
from tools.keep import Keep
from tools.stack import (
    PROJECT,
    Stack,
    free_port,
    sign_up,
    start_emulators,
    start_storage_emulator,
)


def start(log_dir: Path, ports: dict[str, int], keep: Keep) -> Stack:
    log_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(log_dir)
    try:
        start_emulators(stack, ports["firestore"], ports["auth"], ports["hub"], keep)
        start_storage_emulator(stack, ports["storage"], keep)
    except BaseException:
        stack.stop()
        raise
    return stack


def test_make_devs_data_outlives_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep = Keep(tmp_path / "data", PROJECT)
    ports = {name: free_port() for name in ("firestore", "auth", "hub", "storage")}
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{ports['firestore']}")
    auth = f"127.0.0.1:{ports['auth']}"
    bucket = f"{PROJECT}.appspot.com"
    files = f"http://127.0.0.1:{ports['storage']}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", files)

    stack = start(tmp_path / "logs-1", ports, keep)
    try:
        uid = sign_up(auth, "teacher@example.com", "spark-local").uid
        db = firestore.Client(project=PROJECT)
        db.collection(uid).document("client").set({"kept": True})
        db.close()
        store = connect(PROJECT, bucket, files)
        asyncio.run(store.write(f"{uid}/uploads/a.pdf", b"%PDF-1.4", "application/pdf"))
        store.close()
        assert keep.save(f"127.0.0.1:{ports['firestore']}", f"127.0.0.1:{ports['hub']}") == []
    finally:
        stack.stop()

    stack = start(tmp_path / "logs-2", ports, keep)
    try:
        assert sign_up(auth, "teacher@example.com", "spark-local").uid == uid
        db = firestore.Client(project=PROJECT)
        assert db.collection(uid).document("client").get().to_dict() == {"kept": True}
        db.close()
        store = connect(PROJECT, bucket, files)
        kept = asyncio.run(store.stat(f"{uid}/uploads/a.pdf"))
        store.close()
        assert kept is not None and kept.size_bytes == len(b"%PDF-1.4")
    finally:
        stack.stop()
