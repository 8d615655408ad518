"""The stores' one compare-and-set loop (``shared/store/firestore/cas.py``), on its own:
what it retries, what it lets out, and when it forgets the remembered copies."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc

from shared.errors import RunInProgress, StoreError
from shared.store.firestore import cas
from shared.store.firestore.common import MAX_ATTEMPTS


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instantly(attempt: int, base: float = 0.0, cap: float = 0.0) -> None:
        return None

    monkeypatch.setattr(cas, "back_off", instantly)


class Attempts:
    """An attempt that fails as told, once per entry of ``outcomes``, then lands."""

    def __init__(self, *outcomes: BaseException) -> None:
        self.outcomes = list(outcomes)
        self.fresh: list[bool] = []
        self.forgotten = 0

    async def __call__(self, fresh: bool) -> str:
        self.fresh.append(fresh)
        if self.outcomes:
            raise self.outcomes.pop(0)
        return "landed"

    def forget(self) -> None:
        self.forgotten += 1


async def test_a_lost_race_or_a_stale_verdict_is_judged_again_on_a_fresh_read() -> None:
    attempts = Attempts(gexc.FailedPrecondition("raced"), cas.Again(), gexc.AlreadyExists("made"))
    landed = await cas.compare_and_set(attempts, too_fast="too fast", forget=attempts.forget)
    assert landed == "landed"
    assert attempts.fresh == [False, True, True, True]
    assert attempts.forgotten == 3


async def test_a_refusal_on_a_fresh_read_propagates_and_keeps_the_copy() -> None:
    attempts = Attempts(RunInProgress("busy"))
    with pytest.raises(RunInProgress):
        await cas.compare_and_set(attempts, too_fast="too fast", forget=attempts.forget)
    assert attempts.forgotten == 0


async def test_a_failed_store_forgets_the_copy() -> None:
    attempts = Attempts(gexc.ServiceUnavailable("down"))
    with pytest.raises(StoreError) as raised:
        await cas.compare_and_set(attempts, too_fast="too fast", forget=attempts.forget)
    assert raised.value.message != "too fast"
    assert attempts.forgotten == 1


async def test_a_change_that_keeps_losing_is_given_up() -> None:
    attempts = Attempts(*(cas.Again() for _ in range(MAX_ATTEMPTS)))
    with pytest.raises(StoreError) as raised:
        await cas.compare_and_set(attempts, too_fast="too fast")
    assert raised.value.message == "too fast"
    assert len(attempts.fresh) == MAX_ATTEMPTS


def test_a_verdict_on_a_remembered_copy_stands_only_when_it_writes() -> None:
    def refuse() -> None:
        raise RunInProgress("busy")

    with pytest.raises(cas.Again):
        cas.judged(refuse, remembered=True)
    with pytest.raises(RunInProgress):
        cas.judged(refuse, remembered=False)
    assert cas.judged(lambda: 1, remembered=True) == 1
    with pytest.raises(cas.Again):
        cas.confirmed(False, remembered=True)
    cas.confirmed(False, remembered=False)
    cas.confirmed(True, remembered=True)
