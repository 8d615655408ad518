"""The local data ``make dev`` keeps between runs, under ``.stack/data/``.

Without it every restart began from nothing: conversations, lessons and the test
user's uid (so its conversations' paths) were gone. Each emulator keeps its data its
own way:

* Firestore (the Cloud CLI's emulator) starts with ``--import-data`` from the last
  export, and is exported through its own HTTP endpoint as the stack stops. (Its
  ``--export-on-exit`` flag was tried: on SIGTERM it wrote nothing, once logging
  "Failed during export".)
* Auth (firebase-tools) starts with ``--import`` and is exported through our own
  emulator hub (``/_admin/export``) as the stack stops. (firebase-tools'
  ``--export-on-exit`` finds its hub by project id in a file under the temporary
  directory: with a second stack of the same project running, as ``make test`` is,
  it exported the other stack's users.)
* Cloud Storage (``gcp-storage-emulator``) keeps its files on disk, in ``storage/``.
* Cloud Tasks keeps nothing: tasks pending when the stack stops are lost. A run left
  open is closed by the next send or stop in its conversation.

Each export is written beside the last one and swapped in only once complete, so a
stack killed while it saves keeps the previous data. ``make dev-reset`` removes it all.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path

EXPORT_NAME = "spark"
SAVE_TIMEOUT = 60


@dataclass(frozen=True)
class Keep:
    """Where one stack's data is kept between runs."""

    root: Path
    project: str

    @property
    def firestore(self) -> Path:
        return self.root / "firestore"

    @property
    def auth(self) -> Path:
        return self.root / "auth"

    def firestore_flags(self) -> list[str]:
        """The Firestore emulator's flags to start from the last export, if any."""
        metadata = self.firestore / EXPORT_NAME / f"{EXPORT_NAME}.overall_export_metadata"
        return [f"--import-data={metadata}"] if metadata.exists() else []

    def auth_flags(self) -> list[str]:
        """firebase-tools' flags to start the Auth emulator from the last export, if any."""
        metadata = self.auth / "firebase-export-metadata.json"
        return ["--import", str(self.auth)] if metadata.exists() else []

    def storage_env(self) -> dict[str, str]:
        """gcp-storage-emulator keeps its files under ``STORAGE_BASE/STORAGE_DIR``."""
        return {"STORAGE_BASE": str(self.root), "STORAGE_DIR": "storage"}

    def save(self, firestore_host: str, hub_host: str) -> list[str]:
        """Export Firestore's and Auth's data from the running emulators; returns what
        could not be saved (its previous data is kept)."""
        database = f"projects/{self.project}/databases/(default)"
        firestore = f"http://{firestore_host}/emulator/v1/projects/{self.project}:export"
        exports = {
            "Firestore": (
                self.firestore,
                lambda into: {
                    "database": database,
                    "export_directory": into,
                    "export_name": EXPORT_NAME,
                },
                firestore,
            ),
            "Auth": (
                self.auth,
                lambda into: {"path": into, "initiatedBy": "make dev"},
                f"http://{hub_host}/_admin/export",
            ),
        }
        failed = []
        for what, (target, body, url) in exports.items():
            staging = target.with_name(target.name + ".new")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            try:
                _post(url, body(str(staging)))
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                failed.append(f"{what} ({exc})")
                continue
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        return failed

    def reset(self) -> bool:
        """Remove everything kept; ``False`` when there was nothing."""
        if not self.root.exists():
            return False
        shutil.rmtree(self.root)
        return True


def _post(url: str, body: dict[str, str]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=SAVE_TIMEOUT) as response:
        response.read()
