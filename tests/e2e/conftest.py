"""The real local stack: emulators (started by ``make test``), our fake OpenAI server
and the ``api`` function as a real functions-framework process on a real socket."""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
import secrets
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.config import Settings
from shared.store.cloudstorage import CloudStorageFileStore, connect
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, ServerThread
from tools.audit import settle_and_audit
from tools.stack import Stack, free_port, sign_up, start_function, start_functions

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "demo-spark"

pytestmark = pytest.mark.emulator


@dataclass(frozen=True)
class StackUser:
    uid: str
    token: str
    email: str


def _stack_env() -> tuple[str, str]:
    firestore_host = os.environ.get("FIRESTORE_EMULATOR_HOST")
    auth_host = os.environ.get("FIREBASE_AUTH_EMULATOR_HOST")
    if not firestore_host or not auth_host:
        pytest.fail("end-to-end tests need the emulators: run them with `make test`")
    return firestore_host, auth_host


@pytest.fixture(scope="session")
def emulators() -> tuple[str, str]:
    return _stack_env()


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    with ServerThread(fake.app) as server:
        fake.port = server.port  # type: ignore[attr-defined]
        yield fake


@pytest.fixture(scope="session")
def fake_anthropic() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic()
    with ServerThread(fake.app) as server:
        fake.port = server.port  # type: ignore[attr-defined]
        yield fake


def provider_env(provider: str, port: int, model: str = "fake-model") -> dict[str, str]:
    """The environment that points a function at the fake of ``provider`` on ``port``
    (``SPARK_MODEL=provider:model`` and that SDK's own key and base-URL variables)."""
    base = {
        "openai": ("OPENAI", f"http://127.0.0.1:{port}/v1"),
        "anthropic": ("ANTHROPIC", f"http://127.0.0.1:{port}"),
        "google": ("GEMINI", f"http://127.0.0.1:{port}"),
    }
    prefix, url = base[provider]
    return {
        "SPARK_MODEL": f"{provider}:{model}",
        f"{prefix}_API_KEY": "test-key",
        f"{prefix}_BASE_URL": url,
    }


@dataclass(frozen=True)
class Functions:
    api: str
    tasks: str
    env: dict[str, str]


@dataclass
class ExtraApi:
    """Another ``api`` process (another instance), on its own port."""

    url: str
    stack: Stack

    def kill(self) -> None:
        """SIGKILL, as when an instance vanishes: no clean-up runs."""
        for _, process in self.stack.processes:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def offline_functions(name: str) -> Iterator[Functions]:
    """A stack of its own with no provider key (nor base URL), as ``make dev`` runs on a
    new machine: the demo model answers, in the api and in the tasks function alike."""
    logs = Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="spark-e2e-"))
    stack = Stack(logs / name)
    stack.log_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "SPARK_MODEL": "gpt-4o-mini",
        "OPENAI_API_KEY": "",
        "OPENAI_BASE_URL": "",
        "SPARK_OFFLINE_TOKEN_DELAY_MS": "1",
        "SPARK_KEEPALIVE_SECONDS": "1",
        "SPARK_THROTTLE_MS": "200",
        "K_SERVICE": "",
        "SPARK_TASK_RETRY_BASE_MS": "200",
        "SPARK_TASK_LEASE_SECONDS": "20",
        "SPARK_WATCHDOG_GRACE_SECONDS": "1",
    }
    try:
        yield Functions(*start_functions(stack, free_port(), free_port(), env), env=env)
    finally:
        stack.stop()


def extra_api(functions: Functions, **env: str) -> ExtraApi:
    logs = Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="spark-e2e-"))
    stack = Stack(logs)
    full = {**functions.env, "SPARK_TASKS_URL": functions.tasks + "/", **env}
    return ExtraApi(start_function(stack, "api", free_port(), full), stack)


@pytest.fixture(scope="session")
def second_api(functions: Functions) -> Iterator[ExtraApi]:
    """A second instance of ``api``, as the functions' own two run (a model held silent
    by a test waits as long as theirs: a test that needs an impatient one makes it)."""
    api = extra_api(functions)
    try:
        yield api
    finally:
        api.stack.stop()


@pytest.fixture(scope="session")
def anthropic_api(functions: Functions, fake_anthropic: FakeAnthropic) -> Iterator[ExtraApi]:
    """An instance of ``api`` whose model is ``anthropic:fake-model``, on the Anthropic fake."""
    port: int = fake_anthropic.port  # type: ignore[attr-defined]
    api = extra_api(functions, **provider_env("anthropic", port))
    try:
        yield api
    finally:
        api.stack.stop()


@pytest.fixture(scope="session")
def functions(emulators: tuple[str, str], fake_openai: FakeOpenAI) -> Iterator[Functions]:
    logs = Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="spark-e2e-"))
    stack = Stack(logs)
    env = {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        **provider_env("openai", fake_openai.port),  # type: ignore[attr-defined]
        "SPARK_KEEPALIVE_SECONDS": "1",
        "SPARK_THROTTLE_MS": "200",
        "K_SERVICE": "",
        "SPARK_TASK_RETRY_BASE_MS": "200",
        "SPARK_TASK_LEASE_SECONDS": "20",
        "SPARK_WATCHDOG_GRACE_SECONDS": "1",
        # The retention sweep runs only when a test calls it (test_retention.py), and
        # then finds only what is older than this (about 25 years): nothing the other
        # tests make, some of which date their documents months back, is that old.
        "SPARK_RETENTION_DAYS": "9000",
    }
    if not os.environ.get("CLOUD_TASKS_EMULATOR_HOST"):
        pytest.fail("end-to-end tests need the Cloud Tasks emulator: run them with `make test`")
    try:
        # Two processes of each function behind round-robin proxies (tools/proxy.py):
        # every test meets several instances, as production does.
        yield Functions(*start_functions(stack, free_port(), free_port(), env), env=env)
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def api_url(functions: Functions) -> str:
    return functions.api


# Every user ``new_user`` made, in order: each test is audited on the ones it made.
_USERS: list[str] = []
# How long the audit after a test waits for its users' runs and tasks to finish.
AUDIT_WAIT_SECONDS = 60.0


def new_user(auth_host: str) -> StackUser:
    email = f"user-{secrets.token_hex(6)}@example.com"
    account = sign_up(auth_host, email, "secret-123")
    _USERS.append(account.uid)
    return StackUser(uid=account.uid, token=account.token, email=email)


@pytest.fixture(autouse=True)
def _audited(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the test, wait for the users it made to settle, then check every invariant
    of their documents (``shared/audit/``): nothing left stuck or inconsistent."""
    first = len(_USERS)
    # Judged by the settings the functions run with (their leases and grace).
    env = request.getfixturevalue("functions").env if "functions" in request.fixturenames else {}
    yield
    users = _USERS[first:]
    if not users:
        return
    settings = Settings.from_env({**os.environ, **env})
    violations = settle_and_audit(_audit_client(), users, AUDIT_WAIT_SECONDS, settings)
    if violations:
        found = "\n".join(f"  {v}" for v in violations)
        pytest.fail(f"the audit after the test found {len(violations)} violation(s):\n{found}")


_AUDIT_CLIENT: list[firestore.Client] = []


def _audit_client() -> firestore.Client:
    """One client for every audit of the session (made on first use)."""
    if not _AUDIT_CLIENT:
        _AUDIT_CLIENT.append(firestore.Client(project=PROJECT))
    return _AUDIT_CLIENT[0]


@pytest.fixture
def alice(emulators: tuple[str, str]) -> StackUser:
    return new_user(emulators[1])


@pytest.fixture
def bob(emulators: tuple[str, str]) -> StackUser:
    return new_user(emulators[1])


@pytest.fixture(scope="session")
def db(emulators: tuple[str, str]) -> Iterator[firestore.Client]:
    client = firestore.Client(project=PROJECT)
    yield client
    client.close()


def conversation_doc(db: firestore.Client, uid: str, conversation_id: str) -> dict[str, Any] | None:
    ref = (
        db.collection(uid).document("client").collection("conversations").document(conversation_id)
    )
    return ref.get().to_dict()


def unsigned_token(uid: str, project: str = PROJECT, expires_in: int = 3600) -> str:
    """An unsigned Firebase-style ID token, as the emulators accept."""
    now = int(time.time())

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims = {
        "iss": f"https://securetoken.google.com/{project}",
        "aud": project,
        "auth_time": now - 10,
        "user_id": uid,
        "sub": uid,
        "iat": now - 10,
        "exp": now + expires_in,
        "firebase": {"identities": {}, "sign_in_provider": "custom"},
    }
    return part({"alg": "none", "kid": "fakekid", "typ": "JWT"}) + "." + part(claims) + "."


@dataclass
class SseEvent:
    id: str
    event: str
    data: dict[str, Any]


def read_events(response: httpx.Response) -> Iterator[SseEvent | str]:
    """Yields events, and comment lines as plain strings, as they arrive."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            yield line
        elif line == "":
            if fields:
                yield SseEvent(fields["id"], fields["event"], json.loads(fields["data"]))
                fields = {}
        else:
            key, _, value = line.partition(": ")
            fields[key] = value


# How long a wait for a condition gives up after: a safety net, so that a broken build
# fails instead of hanging, never a verdict on speed. What is awaited takes a second or a
# few here; a machine three times slower, or loaded, still meets it far inside this.
WAIT_SECONDS = 60.0


def wait_for(predicate: Any, timeout: float = WAIT_SECONDS, what: str = "") -> Any:
    """``predicate()``'s first truthy value, polled until ``timeout`` seconds pass; the
    failure names ``what`` was awaited (by default, the predicate's own source line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up after {timeout:.0f} s waiting for {what or _named(predicate)}")


def _named(predicate: Any) -> str:
    """A predicate as its failure names it: a lambda by its source, a function by name."""
    name = getattr(predicate, "__name__", "") or repr(predicate)
    if name != "<lambda>":
        return f"{name}()"
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return "a condition"


def auth(user: StackUser, sse: bool = True) -> dict[str, str]:
    """The headers of a signed-in client (asking for a stream unless ``sse`` is false)."""
    headers = {"Authorization": f"Bearer {user.token}"}
    if sse:
        headers["Accept"] = "text/event-stream"
    return headers


def conversation_path(conversation_id: str, what: str) -> str:
    return f"/api/spark/agent/conversations/{conversation_id}/{what}"


def settled(db: firestore.Client, uid: str, conversation_id: str, count: int) -> Any:
    """The conversation once no run is active and it holds at least ``count`` messages."""
    doc = conversation_doc(db, uid, conversation_id)
    if doc and "activeRun" not in doc and len(doc["messages"]) >= count:
        return doc
    return None


@pytest.fixture(scope="session")
def bucket() -> Iterator[CloudStorageFileStore]:
    """The uploads bucket on the Cloud Storage emulator."""
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if not host:
        pytest.fail("attachments need the Cloud Storage emulator: run them with `make test`")
    store = connect(PROJECT, f"{PROJECT}.appspot.com", host)
    yield store
    store.close()


def upload(
    bucket: CloudStorageFileStore, path: str, data: bytes, content_type: str
) -> dict[str, Any]:
    """Put ``data`` in the bucket at ``path``, as a client's upload; its attachment."""
    asyncio.run(bucket.write(path, data, content_type))
    return {"storagePath": path, "contentType": content_type, "sizeBytes": len(data)}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed browser test's report ends with what its pages said (``test_web._SAID``:
    console messages, API requests, failed requests), so that a failure seen once, in CI,
    explains itself."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    said = getattr(getattr(item, "module", None), "_SAID", None)
    if report.when == "call" and report.failed and said:
        report.sections.append(("what the pages said (last 60)", "\n".join(said[-60:])))
    if report.when == "call" and report.failed:
        errors = _logged_errors()
        if errors:
            report.sections.append(("what the functions logged as errors (last 10)", errors))


def _logged_errors(last: int = 10) -> str:
    """The last errors the stack's functions logged (with their stack traces): a failure
    seen once, in CI, whose cause is in a function's log, not in the test's."""
    logs = os.environ.get("SPARK_STACK_LOGS")
    if not logs:
        return ""
    found: list[tuple[float, str]] = []
    for path in Path(logs).rglob("*.log"):
        if not path.name.startswith(("api", "tasks")):
            continue  # the emulators' logs are long and not ours
        written = path.stat().st_mtime
        with path.open(errors="replace") as lines:
            for line in lines:
                if '"severity": "ERROR"' in line or '"severity": "CRITICAL"' in line:
                    found.append((written, f"{path.name}: {line.strip()}"))
    found.sort(key=lambda entry: entry[0])  # the files by when each was last written
    return "\n".join(line for _, line in found[-last:])
