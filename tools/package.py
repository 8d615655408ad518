"""Build the functions' source archive, as Cloud Functions deploys it (``make package``).

    python -m tools.package dist/functions.zip

The archive holds ``main.py`` at its root (the entry points), the packages it imports
(``spark_http/``, ``shared/``), ``prompts/`` and a ``requirements.txt`` exported from
``uv.lock`` with hashes, so the build installs exactly the locked versions. It is
reproducible: the same sources give the same bytes (entries sorted, fixed times and
permissions, stored uncompressed so no zlib version can change the bytes), and Terraform
names the uploaded object by its sha256.

Each module also comes compiled (``__pycache__/*.cpython-311.pyc``, ``checked-hash``:
valid whatever times the unpacked files get, as long as the source is the one compiled;
an edited source is compiled again, as without them). pip compiles the requirements it
installs; our own modules came as source alone, so an instance could compile ~130 of
them before its first request: ~0.13 s of ``import main`` here (bench/cold_start.py
(a), the requirements compiled in both). They are compiled by the Python that builds
the archive (``make package``), in a child with a fixed hash seed so that set constants
are written in the same order every time. Bytecode is named by the Python version that
made it: a runtime of another minor version than the builder's ignores it and compiles
the source, as before (``terraform/``'s ``python_runtime`` is ``python311`` by default: build
with the same minor version).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (folder in the repository, folder in the archive, the file names it takes)
SOURCES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("functions/spark_http", "spark_http", ("*.py",)),
    ("shared", "shared", ("*.py", "py.typed")),
    ("prompts", "prompts", ("*.md",)),
)
ENTRY_POINTS = ("functions/main.py", "main.py")
EXPORT = (
    "export",
    "--frozen",
    "--no-dev",
    "--no-emit-project",
    "--format",
    "requirements-txt",
)
# 1980-01-01, the earliest time a zip entry can hold.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644


def uv() -> str:
    """The project's pinned uv (``make setup`` installs it), else one on the PATH."""
    pinned = ROOT / ".tools" / "bin" / "uv"
    found = str(pinned) if pinned.exists() else shutil.which("uv")
    if found is None:
        sys.exit("uv is not installed; run `make setup` first.")
    return found


def requirements(root: Path = ROOT) -> bytes:
    """The runtime dependencies, pinned with hashes, as ``uv.lock`` has them."""
    result = subprocess.run(
        [uv(), *EXPORT],
        cwd=root,
        capture_output=True,
        check=True,
        env={**os.environ, "UV_NO_PROGRESS": "1"},
    )
    return result.stdout


def sources(root: Path = ROOT) -> dict[str, Path]:
    """Each file of the archive (but ``requirements.txt``) by its name in the archive."""
    found = {ENTRY_POINTS[1]: root / ENTRY_POINTS[0]}
    for folder, target, patterns in SOURCES:
        base = root / folder
        for pattern in patterns:
            for path in base.rglob(pattern):
                if "__pycache__" not in path.parts and path.is_file():
                    found[f"{target}/{path.relative_to(base).as_posix()}"] = path
    return found


_COMPILE = """
import json, py_compile, sys
for source, compiled, name in json.load(sys.stdin):
    py_compile.compile(
        source, cfile=compiled, dfile=name, doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
    )
"""


def bytecode(modules: dict[str, bytes]) -> dict[str, bytes]:
    """Each module of ``modules`` (archive name: source) compiled, by its archive name
    (``a/b.py`` -> ``a/__pycache__/b.cpython-311.pyc``)."""
    tag = sys.implementation.cache_tag
    with tempfile.TemporaryDirectory(prefix="spark-package-") as tmp:
        jobs, names = [], {}
        for n, (name, text) in enumerate(sorted(modules.items())):
            folder, _, file = name.rpartition("/")
            source = Path(tmp, f"{n}.py")
            source.write_bytes(text)
            cached = f"{folder}/__pycache__/" if folder else "__pycache__/"
            names[cached + file.removesuffix(".py") + f".{tag}.pyc"] = Path(tmp, f"{n}.pyc")
            jobs.append((str(source), str(Path(tmp, f"{n}.pyc")), name))
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(
            [sys.executable, "-c", _COMPILE],
            input=json.dumps(jobs).encode(),
            env=env,
            check=True,
        )
        return {name: path.read_bytes() for name, path in names.items()}


def build(out: Path, root: Path = ROOT) -> str:
    """Write the archive to ``out``; returns its sha256."""
    entries = {name: path.read_bytes() for name, path in sources(root).items()}
    entries |= bytecode({name: text for name, text in entries.items() if name.endswith(".py")})
    entries["requirements.txt"] = requirements(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.create_system = 3  # Unix, so the mode below is read as one
            info.external_attr = FILE_MODE << 16
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, entries[name])
    partial.replace(out)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tools.package OUT.zip")
    out = Path(sys.argv[1])
    digest = build(out)
    print(f"{out}  sha256 {digest}  ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
