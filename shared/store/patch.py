"""The smallest write that turns one version of a conversation into the next.

Document changes are pure functions from a ``Conversation`` to a new one (``mutate``).
Writing the result whole would send the full ``messages`` array every time, a cost that
grows with the conversation (bench/stream_overhead.py (d) sets the two side by side).
So the store sends only what changed, found cheaply:

* a top-level field that is the *same object* as before is unchanged (``model_copy``
  keeps untouched fields by reference), so no comparison is needed;
* ``messages`` that keep every earlier element by reference and add some at the end
  are an append: only the new messages are sent (``ArrayUnion``; their ids are unique,
  so it never drops one);
* in ``activeRun`` (and its in-flight ``message``) only the sub-fields that changed are
  sent, by field path: a streaming write is ``activeRun.message.content`` and
  ``activeRun.leaseExpiresAt``, a few values for the client to encode, however long the
  conversation (encoding is most of a write's CPU: ~35 protobuf values for the whole
  ``activeRun`` against ~6);
* any other changed field is sent whole.

The document's size is tracked the same way, per field, and measured by Firestore's
own rules (UTF-8 bytes, not JSON), so checking the limit costs nothing per streaming
write either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from shared.schemas.documents import Conversation, Message

_FIELDS = {name: info.alias or name for name, info in Conversation.model_fields.items()}
# Fields changed one sub-field at a time (by field path) rather than whole.
_NESTED = {"active_run", "message"}


@dataclass(frozen=True, slots=True)
class Patch:
    """Field writes, in Firestore's terms (top-level camelCase names)."""

    put: dict[str, Any] = field(default_factory=dict)
    append: dict[str, list[Any]] = field(default_factory=dict)
    delete: frozenset[str] = frozenset()
    # Top-level fields changed by field path, and their whole new value (for sizing).
    nested: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.put or self.append or self.delete)

    @property
    def fields(self) -> set[str]:
        """The top-level fields this patch writes."""
        return {path.split(".", 1)[0] for path in (*self.put, *self.append, *self.delete)}

    @property
    def paths(self) -> set[str]:
        """The field paths this patch writes."""
        return {*self.put, *self.append, *self.delete}


def stored_size(value: Any) -> int:
    """Bytes ``value`` takes in a Firestore document, by Firestore's own rules: a string
    is its UTF-8 bytes plus 1; a number or timestamp 8; a boolean or null 1; an array the
    sum of its elements; a map the sum of its keys (as strings) and values."""
    if isinstance(value, str):
        return len(value.encode("utf-8")) + 1
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return 8
    if isinstance(value, dict):
        return sum(stored_size(str(k)) + stored_size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(stored_size(item) for item in value)
    if isinstance(value, bytes):
        return len(value)
    return 8  # datetimes (timestamps) and other 8-byte scalars


def field_size(name: str, value: Any) -> int:
    return stored_size(name) + stored_size(value)


# A document's own overhead (32 bytes) and its name (/{uid}/client/conversations/{id}:
# each segment's bytes plus 1, plus 16), taken at the longest ids we allow.
DOCUMENT_OVERHEAD = 32 + 16 + (128 + 1) + len("client") + 1 + len("conversations") + 1 + 65


@dataclass(frozen=True, slots=True)
class Sizes:
    """The stored size of each top-level field of a conversation document."""

    fields: dict[str, int]

    @classmethod
    def of(cls, document: dict[str, Any]) -> Sizes:
        return cls({k: field_size(k, v) for k, v in document.items()})

    @property
    def total(self) -> int:
        return DOCUMENT_OVERHEAD + sum(self.fields.values())

    def after(self, patch: Patch) -> Sizes:
        fields = dict(self.fields)
        for name in patch.delete:
            fields.pop(name, None)
        for name, value in patch.put.items():
            if "." not in name:
                fields[name] = field_size(name, value)
        for name, value in patch.nested.items():
            fields[name] = field_size(name, value)
        for name, items in patch.append.items():
            fields[name] = fields.get(name, stored_size(name)) + sum(
                stored_size(item) for item in items
            )
        return Sizes(fields)


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if hasattr(value, "to_firestore"):
        return value.to_firestore()
    return value


def _appended(before: list[Message], after: list[Message]) -> list[Message] | None:
    """The messages ``after`` adds at the end of ``before`` (kept by reference), or None."""
    if len(after) < len(before):
        return None
    for old, new in zip(before, after, strict=False):
        if old is not new:
            return None
    return after[len(before) :]


def _sub_fields(
    prefix: str, old: BaseModel, new: BaseModel, put: dict[str, Any], deleted: set[str]
) -> None:
    """The changed sub-fields of ``new`` (same model as ``old``), by field path."""
    for name, info in type(new).model_fields.items():
        before, after = getattr(old, name), getattr(new, name)
        if before is after:
            continue
        path = f"{prefix}.{info.alias or name}"
        if name in _NESTED and _splittable(before, after):
            _sub_fields(path, before, after, put, deleted)
        elif before == after:
            continue
        elif after is None:
            deleted.add(path)
        else:
            put[path] = _dump(after)


def _splittable(old: Any, new: Any) -> bool:
    return (
        isinstance(old, BaseModel)
        and type(old) is type(new)
        and not old.model_extra
        and not new.model_extra
    )


def diff(before: Conversation, after: Conversation) -> Patch:
    """What to write so the stored ``before`` becomes ``after``."""
    patch = Patch()
    deleted: set[str] = set()
    for name, alias in _FIELDS.items():
        old, new = getattr(before, name), getattr(after, name)
        if old is new:
            continue
        if name == "messages":
            added = _appended(old, new)
            if added is not None:
                if added:
                    patch.append[alias] = [m.to_firestore() for m in added]
                continue
        if name in _NESTED and _splittable(old, new):
            _sub_fields(alias, old, new, patch.put, deleted)
            patch.nested[alias] = _dump(new)
            continue
        if old == new:
            continue
        if new is None:
            deleted.add(alias)
        else:
            patch.put[alias] = _dump(new)
    old_extra, new_extra = before.model_extra or {}, after.model_extra or {}
    for key in old_extra.keys() | new_extra.keys():
        if key not in new_extra:
            deleted.add(key)
        elif old_extra.get(key) != new_extra[key]:
            patch.put[key] = new_extra[key]
    return Patch(patch.put, patch.append, frozenset(deleted), patch.nested)


def apply(document: dict[str, Any], patch: Patch) -> dict[str, Any]:
    """``document`` with ``patch`` applied, as Firestore would (for the in-memory store)."""
    result = dict(document)
    for path in patch.delete:
        *parents, leaf = path.split(".")
        node = _walk(result, parents, create=False)
        if node is not None:
            node.pop(leaf, None)
    for path, value in patch.put.items():
        *parents, leaf = path.split(".")
        node = _walk(result, parents, create=True)
        assert node is not None
        node[leaf] = value
    for name, items in patch.append.items():
        existing = list(result.get(name) or [])
        result[name] = existing + [item for item in items if item not in existing]
    return result


def _walk(document: dict[str, Any], parents: list[str], create: bool) -> dict[str, Any] | None:
    node = document
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            if not create:
                return None
            child = {}
        child = dict(child)  # copy on write: the caller's document stays as it was
        node[key] = child
        node = child
    return node
