"""Firestore's writes as raw protobuf messages, sent on the client's own gRPC channel.

The client library builds every write as proto-plus messages (a Python object per
value) and sends it through its generated client's wrappers (request coercion, retry
and timeout objects, metadata), then hands gRPC the proto-plus request to convert.
Measured on the emulator, client CPU per write, that wrapping and encoding cost about
as much again as gRPC's own send, most of it in the encoding (bench/stream_overhead.py
(d) prints a streaming write's CPU); encoded here, into the C protobuf messages
directly, it is a small part of the send. Every conversation write (the opening, each
streaming write, the last) goes this way.

What the library's write did is kept: the same ``Write`` (a test compares them
message for message, ``tests/unit/test_firestore_raw.py``), the same metadata (resource
prefix, routing header and, on the emulator, its owner token), a 60 s deadline, and
retries with backoff on ``UNAVAILABLE`` and ``RESOURCE_EXHAUSTED`` (and ``ABORTED`` for
``BatchWrite``) as its defaults do. Retrying is safe: every write here carries a
precondition, so one that landed before its answer was lost fails the next time, and
the caller reads again. Errors are ``google.api_core`` exceptions, as the library's.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.api_core import gapic_v1
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.firestore import AsyncClient
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.transforms import DELETE_FIELD, ArrayUnion, Sentinel
from google.cloud.firestore_v1.types import document, firestore, write

# The C protobuf classes under the library's proto-plus wrappers.
_Write: Any = write.Write.pb()
_CommitRequest: Any = firestore.CommitRequest.pb()
_CommitResponse: Any = firestore.CommitResponse.pb()
_BatchWriteRequest: Any = firestore.BatchWriteRequest.pb()
_BatchWriteResponse: Any = firestore.BatchWriteResponse.pb()

DEADLINE = 60.0
"""Seconds a write may take, its retries included (the library's default)."""
_RETRIED = (gexc.ServiceUnavailable, gexc.ResourceExhausted)
_BATCH_RETRIED = (*_RETRIED, gexc.Aborted)
_SIMPLE = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")


def encode(target: Any, value: Any) -> None:
    """Set the ``Value`` message ``target`` to ``value``, as ``_helpers.encode_value``
    would make it, in place (maps and arrays fill their own entries: nothing copied)."""
    if isinstance(value, str):
        target.string_value = value
    elif value is None:
        target.null_value = 0
    elif isinstance(value, bool):
        target.boolean_value = value
    elif isinstance(value, int):
        target.integer_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, dict):
        fields = target.map_value.fields
        target.map_value.SetInParent()  # an empty map is still a map
        for key, item in value.items():
            encode(fields[key], item)
    elif isinstance(value, (list, tuple)):
        values = target.array_value.values
        target.array_value.SetInParent()
        for item in value:
            encode(values.add(), item)
    elif isinstance(value, datetime.datetime):
        encode_time(target.timestamp_value, value)
    else:  # bytes, references, geo points, vectors: rare here, the library's way
        target.CopyFrom(document.Value.pb(_helpers.encode_value(value)))


def mask_path(path: Sequence[str]) -> str:
    """A field path as the API writes it (segments that are not plain names quoted)."""
    return ".".join(
        part if _SIMPLE.match(part) else "`" + part.replace("\\", "\\\\").replace("`", "\\`") + "`"
        for part in path
    )


def create_write(path: str, data: Mapping[str, Any]) -> Any:
    """The ``Write`` of ``DocumentReference.create``: the whole document, if none exists."""
    result = _whole(path, data, "created")
    result.current_document.exists = False
    return result


def _whole(path: str, data: Mapping[str, Any], what: str) -> Any:
    """A ``Write`` of the whole document ``data`` at ``path``, with no precondition (a
    transform is refused: ``what`` says of which kind of write)."""
    result = _Write()
    result.update.name = path
    fields = result.update.fields
    for key, value in data.items():
        if isinstance(value, Sentinel | ArrayUnion):
            raise ValueError(f"a {what} document's field cannot be a transform: {key}")
        encode(fields[key], value)
    return result


def update_write(
    path: str, updates: Mapping[str, Any], last_update_time: datetime.datetime | None = None
) -> Any:
    """The ``Write`` of ``DocumentReference.update``: each dotted field path in ``updates``
    set to its value, removed (``DELETE_FIELD``) or added to (``ArrayUnion``), if the
    document was last written at ``last_update_time`` (if it exists, when ``None``)."""
    if not updates:
        raise ValueError("Cannot update with an empty document.")
    result = _Write()
    result.update.name = path
    fields = result.update.fields
    mask = result.update_mask.field_paths
    # Always present, if empty: a write without a mask replaces the whole document.
    result.update_mask.SetInParent()
    # In the library's order (by path), so that the messages are the same.
    for parts, value in sorted((key.split("."), value) for key, value in updates.items()):
        if isinstance(value, ArrayUnion):
            transform = result.update_transforms.add()
            transform.field_path = mask_path(parts)
            elements = transform.append_missing_elements.values
            transform.append_missing_elements.SetInParent()
            for element in value.values:
                encode(elements.add(), element)
            continue
        mask.append(mask_path(parts))
        if value is DELETE_FIELD:
            continue
        if isinstance(value, Sentinel):
            raise ValueError(f"unsupported transform for {'.'.join(parts)}: {value!r}")
        node = fields
        for part in parts[:-1]:
            parent = node[part].map_value
            parent.SetInParent()
            node = parent.fields
        encode(node[parts[-1]], value)
    if last_update_time is None:
        result.current_document.exists = True
    else:
        encode_time(result.current_document.update_time, last_update_time)
    return result


def set_write(path: str, data: Mapping[str, Any], *, merge: bool = False) -> Any:
    """The ``Write`` of ``DocumentReference.set`` (no precondition): the whole document,
    or with ``merge`` only the fields ``data`` names (``ArrayUnion`` added to)."""
    if merge:
        result = update_write(path, data)
        result.ClearField("current_document")
        return result
    return _whole(path, data, "set")


def delete_write(path: str, last_update_time: datetime.datetime) -> Any:
    """The ``Write`` of ``DocumentReference.delete`` on the condition that the document
    was last written at ``last_update_time``."""
    result = _Write()
    result.delete = path
    encode_time(result.current_document.update_time, last_update_time)
    return result


def exists_write(path: str) -> Any:
    """A ``Write`` that changes nothing (an update of no field) on the condition that the
    document exists: in a commit, the writes beside it land only if it does. A write
    that changes nothing leaves the document's ``update_time`` as it was."""
    result = _Write()
    result.update.name = path
    result.update_mask.SetInParent()
    result.current_document.exists = True
    return result


def encode_time(target: Any, when: datetime.datetime) -> None:
    """Set the ``Timestamp`` message ``target`` to ``when`` (a naive time is UTC's, as
    the library takes it; its nanoseconds kept, if it has them)."""
    if isinstance(when, DatetimeWithNanoseconds):
        target.CopyFrom(when.timestamp_pb())  # type: ignore[no-untyped-call]
    else:
        target.FromDatetime(when)


def written_at(result: Any) -> datetime.datetime:
    """A ``WriteResult``'s update time, as the library gives it."""
    when: datetime.datetime = DatetimeWithNanoseconds.from_timestamp_pb(  # type: ignore[no-untyped-call]
        result.update_time
    )
    return when


class Writes:
    """Sends raw ``Write`` messages for one client: ``commit`` (all or none) and
    ``batch_write`` (each on its own)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._calls: tuple[str, tuple[tuple[str, str], ...], Any, Any] | None = None

    def _methods(self) -> tuple[str, tuple[tuple[str, str], ...], Any, Any]:
        """The database's name, the calls' metadata, and the two methods (made on
        first use, on the library's own channel)."""
        if self._calls is None:
            client = self._client
            database: str = client._database_string
            routing = gapic_v1.routing_header.to_grpc_metadata(  # type: ignore[no-untyped-call]
                (("database", database),)
            )
            channel: grpc.aio.Channel = client._firestore_api.transport.grpc_channel
            self._calls = (
                database,
                (*client._rpc_metadata, routing),
                channel.unary_unary(
                    "/google.firestore.v1.Firestore/Commit",
                    request_serializer=_CommitRequest.SerializeToString,
                    response_deserializer=_CommitResponse.FromString,
                ),
                channel.unary_unary(
                    "/google.firestore.v1.Firestore/BatchWrite",
                    request_serializer=_BatchWriteRequest.SerializeToString,
                    response_deserializer=_BatchWriteResponse.FromString,
                ),
            )
        return self._calls

    def batch(self) -> Batch:
        return Batch(self)

    async def commit(self, writes: Sequence[Any]) -> list[datetime.datetime]:
        """Apply ``writes`` together, or none of them: each one's update time.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: none was applied
                (``FailedPrecondition``, ``AlreadyExists`` or ``NotFound`` when a
                precondition failed).
        """
        database, metadata, commit, _ = self._methods()
        request = _CommitRequest(database=database, writes=writes)
        response = await self._call(commit, request, metadata, _RETRIED)
        return [written_at(result) for result in response.write_results]

    async def batch_write(
        self, writes: Sequence[Any]
    ) -> list[datetime.datetime | gexc.GoogleAPICallError]:
        """Apply each of ``writes`` on its own: its update time, or why it failed.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: the call itself failed.
        """
        database, metadata, _, batch_write = self._methods()
        request = _BatchWriteRequest(database=database, writes=writes)
        response = await self._call(batch_write, request, metadata, _BATCH_RETRIED)
        return [
            written_at(result)
            if status.code == 0
            else gexc.from_grpc_status(status.code, status.message)  # type: ignore[no-untyped-call]
            for status, result in zip(response.status, response.write_results, strict=True)
        ]

    async def _call(
        self,
        method: Any,
        request: Any,
        metadata: tuple[tuple[str, str], ...],
        retried: tuple[type[Exception], ...],
    ) -> Any:
        deadline = time.monotonic() + DEADLINE
        delay = 0.1
        while True:
            left = deadline - time.monotonic()
            try:
                return await method(request, metadata=metadata, timeout=max(left, 0.001))
            except grpc.aio.AioRpcError as rpc_error:
                error = gexc.from_grpc_error(rpc_error)  # type: ignore[no-untyped-call]
                if not isinstance(error, retried) or time.monotonic() + delay > deadline:
                    raise error from rpc_error
            await asyncio.sleep(random.uniform(0, delay))
            delay = min(delay * 1.3, DEADLINE)


class Batch:
    """Writes gathered for one ``commit`` (the library's ``WriteBatch``, with an update
    time as its precondition instead of a write option)."""

    def __init__(self, writes: Writes) -> None:
        self._writes = writes
        self._pending: list[Any] = []

    def create(self, ref: Any, data: Mapping[str, Any]) -> None:
        self._pending.append(create_write(ref._document_path, data))

    def update(
        self, ref: Any, updates: Mapping[str, Any], last_update_time: datetime.datetime | None
    ) -> None:
        self._pending.append(update_write(ref._document_path, updates, last_update_time))

    async def commit(self) -> list[datetime.datetime]:
        """Apply every write, or none: each one's update time (see ``Writes.commit``)."""
        return await self._writes.commit(self._pending)
