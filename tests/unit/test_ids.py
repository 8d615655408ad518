"""``RandomIds``: the ids every message, run and conversation gets."""

from __future__ import annotations

from shared.ids import RandomIds


def test_random_ids_are_twenty_base36_characters_and_do_not_repeat() -> None:
    ids = RandomIds()
    made = [ids.new("msg") for _ in range(20_000)]
    assert len(set(made)) == len(made)
    assert all(
        len(i) == 24
        and i[:4] == "msg_"
        and set(i[4:]) <= set("0123456789abcdefghijklmnopqrstuvwxyz")
        for i in made
    )
    # Every character position takes every value (20,000 draws; a stuck digit would not).
    assert all(len({i[4 + p] for i in made}) == 36 for p in range(20))
