"""The ``ProvenanceStore`` contract (``shared/egress/provenance.py``), held by the
in-memory fake and by the Firestore adapter against the emulator alike: what a user's
model was given is kept once, by author, and only theirs is read back."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from shared.egress.provenance import Given, InMemoryProvenanceStore, ProvenanceStore
from shared.store.firestore import connect
from tests.e2e.conftest import PROJECT

pytestmark = pytest.mark.emulator

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "firestore"])
async def provenance(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[ProvenanceStore]:
    if request.param == "memory":
        yield InMemoryProvenanceStore()
        return
    stores = connect(PROJECT)
    try:
        yield stores.provenance
    finally:
        stores.close()


async def test_provenance_keeps_each_message_once_by_author(provenance: ProvenanceStore) -> None:
    uid, other = f"u{secrets.token_hex(4)}", f"u{secrets.token_hex(4)}"
    assert await provenance.authors(uid) == frozenset()
    assert await provenance.texts(uid, ["dad"]) == []
    await provenance.record(uid, [Given("m1", "dad", "Dinner at seven.", NOW)])
    await provenance.record(
        uid,
        [Given("m1", "dad", "Dinner at seven.", NOW), Given("m2", "kid", "Code 4321.", NOW)],
    )
    await provenance.record(other, [Given("m3", "kid", "Not for you.", NOW)])
    await provenance.record(uid, [])
    assert await provenance.authors(uid) == {"dad", "kid"}
    assert await provenance.texts(uid, ["dad"]) == ["Dinner at seven."]
    assert sorted(await provenance.texts(uid, ["dad", "kid"])) == ["Code 4321.", "Dinner at seven."]
    assert await provenance.texts(uid, ["mum"]) == []
    assert await provenance.authors(other) == {"kid"}
    assert [(g.message_id, g.author_id, g.text) for g in await provenance.given(uid, ["kid"])] == [
        ("m2", "kid", "Code 4321.")
    ]


async def test_provenance_keeps_a_relayed_message_once_for_each_member_it_quotes(
    provenance: ProvenanceStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    sent = Given("m1", "mum", "Kid says: code 4321.", NOW)
    await provenance.record(uid, [sent, sent.relayed("kid")])
    assert await provenance.authors(uid) == {"mum", "kid"}
    assert await provenance.texts(uid, ["kid"]) == ["Kid says: code 4321."]
    assert await provenance.texts(uid, ["mum"]) == ["Kid says: code 4321."]


async def test_provenance_reads_more_authors_than_one_query_takes(
    provenance: ProvenanceStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    given = [Given(f"m{n}", f"a{n}", f"text {n}", NOW) for n in range(35)]
    await provenance.record(uid, given)
    assert len(await provenance.authors(uid)) == 35
    assert len(await provenance.texts(uid, [g.author_id for g in given])) == 35
