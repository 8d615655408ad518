"""Shared fixtures: no test may reach beyond loopback, and every scripted model is used up."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from shared.llm.scripted import ScriptedProvider

# No property test's verdict may depend on the machine's speed: Hypothesis's default
# deadline (200 ms an example) and its too-slow health check both do. Each test bounds
# itself by its number of examples instead.
settings.register_profile(
    "any-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("any-machine")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``make test`` the unit tests run in two worker processes (pytest-xdist), on
    the one set of emulators: each worker keeps its processes' logs in a folder of its
    own."""
    worker, logs = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("SPARK_STACK_LOGS")
    if worker and logs:
        own = os.path.join(logs, worker)
        os.makedirs(own, exist_ok=True)
        os.environ["SPARK_STACK_LOGS"] = own


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_loopback(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # unix socket path
        return True
    host = address[0]
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded(real: Any) -> Any:
    def connect(self: socket.socket, address: Any) -> Any:
        if not _is_loopback(address):
            raise RuntimeError(f"tests must stay on loopback; tried to reach {address!r}")
        return real(self, address)

    return connect


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forbid real network (and so real model) calls in every test."""
    monkeypatch.setattr(socket.socket, "connect", _guarded(_real_connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded(_real_connect_ex))


@pytest.fixture(autouse=True)
def _scripted_models_used_up(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Fail a test that leaves steps in any ``ScriptedProvider`` it made: a step never
    used is a model call the code was expected to make and did not. A test that leaves
    steps on purpose says so with ``@pytest.mark.leaves_steps``."""
    made: list[ScriptedProvider] = []

    def register(provider: ScriptedProvider) -> None:
        made.append(provider)

    monkeypatch.setattr(ScriptedProvider, "__post_init__", register)
    yield
    if request.node.get_closest_marker("leaves_steps") is None:
        for provider in made:
            provider.assert_exhausted()
