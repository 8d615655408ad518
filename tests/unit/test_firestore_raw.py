"""The raw writes (``shared/store/firestore/raw.py``) are the client library's, message
for message: the same ``Write`` for the same create or update, for any document."""

from __future__ import annotations

import datetime

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.firestore import DELETE_FIELD, ArrayUnion
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.field_path import FieldPath
from google.cloud.firestore_v1.types import write
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.store.firestore import raw

PATH = "projects/demo/databases/(default)/documents/u1/client/conversations/c1"
UTC = datetime.UTC

names = st.one_of(
    st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True),
    st.text(min_size=1, max_size=6).filter(lambda s: "." not in s),  # quoted in a mask
)
times = st.datetimes(
    min_value=datetime.datetime(1971, 1, 1), max_value=datetime.datetime(2200, 1, 1)
).map(lambda t: t.replace(tzinfo=UTC))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    times,
    st.binary(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=4)),
    max_leaves=20,
)
documents = st.dictionaries(names, values, max_size=6)
# A field of an update is named by a path the library parses with a Python regex whose
# ``$`` also matches before a final newline: it writes "A\n" as "A". Ours keeps the name
# as given; the comparison leaves such names out (no field of ours ends in a newline).
path_names = names.filter(lambda s: not s.endswith("\n"))


def library(w: write.Write) -> object:
    return write.Write.pb(w)


@settings(max_examples=200, deadline=None)
@given(documents)
def test_a_create_is_the_librarys(data: dict[str, object]) -> None:
    (expected,) = _helpers.pbs_for_create(PATH, data)
    assert raw.create_write(PATH, data) == library(expected)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.lists(path_names, min_size=1, max_size=3).map(tuple), values, min_size=1, max_size=5
    ),
    st.one_of(st.none(), times),
)
def test_an_update_is_the_librarys(
    updates: dict[tuple[str, ...], object], when: datetime.datetime | None
) -> None:
    # Paths that are one another's prefix are refused by both: keep them apart.
    paths = sorted(updates, key=len)
    kept = [p for i, p in enumerate(paths) if not any(p[: len(q)] == q for q in paths[:i])]
    fields = {".".join(p): updates[p] for p in kept if all(_plain(s) for s in p)}
    if not fields:
        return
    option = None if when is None else _helpers.LastUpdateOption(when)
    (expected,) = _helpers.pbs_for_update(PATH, fields, option)
    assert raw.update_write(PATH, fields, when) == library(expected)


def _plain(part: str) -> bool:
    # A dotted key is split at its dots, so its segments must be plain names (others
    # are quoted in a mask, which a test of ``mask_path`` below compares).
    return raw.mask_path([part]) == part


def test_a_streaming_write_with_its_transforms_and_deletions_is_the_librarys() -> None:
    # (The library sends whole microseconds; Firestore's update times have no more.)
    when = DatetimeWithNanoseconds(2026, 11, 26, 11, 0, 0, nanosecond=123456000, tzinfo=UTC)
    fields = {
        "activeRun.message.content": "Hello, ",
        "activeRun.leaseExpiresAt": datetime.datetime(2026, 11, 26, 11, 0, 30, tzinfo=UTC),
        "activeRun.message.parts": [],
        "activeRun.usage": {},
        "pendingTitle": DELETE_FIELD,
        "messages": ArrayUnion([{"id": "m2", "role": "assistant", "content": "Hi"}]),
        "title with space": "quoted",
    }
    (expected,) = _helpers.pbs_for_update(PATH, fields, _helpers.LastUpdateOption(when))
    assert raw.update_write(PATH, fields, when) == library(expected)
    (expected,) = _helpers.pbs_for_update(PATH, fields, None)
    assert raw.update_write(PATH, fields) == library(expected)
    exact = DatetimeWithNanoseconds(2026, 11, 26, 11, 0, 0, nanosecond=123456789, tzinfo=UTC)
    assert raw.update_write(PATH, fields, exact).current_document.update_time.nanos == 123456789


def test_an_append_alone_keeps_its_empty_mask() -> None:
    # Without a mask (absent, not empty) an update would replace the whole document.
    fields = {"messages": ArrayUnion([{"id": "m3"}])}
    (expected,) = _helpers.pbs_for_update(PATH, fields, None)
    ours = raw.update_write(PATH, fields)
    assert ours == library(expected)
    assert ours.HasField("update_mask") and not ours.update_mask.field_paths


def test_what_the_library_refuses_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        raw.update_write(PATH, {})
    with pytest.raises(ValueError, match="transform"):
        raw.create_write(PATH, {"gone": DELETE_FIELD})
    with pytest.raises(ValueError, match="transform"):
        raw.create_write(PATH, {"list": ArrayUnion([1])})


def test_a_field_name_that_is_not_plain_is_quoted_as_the_library_quotes_it() -> None:
    for parts in (["a b"], ["x", "`tick`"], ["back\\slash", "ok"], ["1st"]):
        assert raw.mask_path(parts) == FieldPath(*parts).to_api_repr()
