"""A request body that does not validate, told in plain words.

pydantic says what failed in its own terms ("String should match pattern
'^[A-Za-z0-9_-]{1,64}$'"); a person reads "conversationId must be 1 to 64 letters,
digits, '-' or '_'". Each problem becomes one such sentence naming the field (by the
name the client sent) and what it may be; pydantic's own words go beside the message,
in ``details``, for client code and for anyone who wants them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from shared.errors import InvalidBody
from shared.prose import listed

# The last step of a location naming a dict's key, when the key is the problem.
_KEY = "[key]"
# A body of a megabyte could name thousands of unknown fields: the answer stays short.
_LONGEST_FIELD = 80
_MOST_PROBLEMS = 10
_MOST_DETAILS = 50
_ID = re.compile(r"^\^\[A-Za-z0-9_-\]\{1,([0-9]+)\}\$$")
_PATTERNS = {
    r"\S": "must not be blank",
    "^[0-9]$": "must be a question's number: one digit, from 0",
}


def _walk(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, Any]:
    """``loc`` as the client would write it (``attachments[0].storagePath``,
    ``answers["0"]``, ``the key '0x' of answers``) and the model it ends in, if any.

    The location is walked along the model's types, so that a dict's key is told from
    a union's member (``str``, ``list[constrained-str]``: pydantic's steps, not names
    the client sent)."""
    parts: list[str] = []
    shape: Any = model
    holder: Any = None
    for step in loc:
        shape = _unwrap(shape)
        if step == _KEY and parts:
            key = parts.pop()
            return f"the key {key[2:-2]!r} of {''.join(parts)}", holder
        if get_origin(shape) in (Union, UnionType):
            shape = _member(shape, str(step))  # pydantic's step, not the client's
            continue
        if isinstance(shape, type) and issubclass(shape, BaseModel):
            holder = shape
            fields = {i.alias or n: i for n, i in shape.model_fields.items()}
            known = fields.get(str(step))
            shape = known.annotation if known is not None else Any
            parts.append(("." if parts else "") + str(step))
        elif get_origin(shape) is dict:
            parts.append(f'["{step}"]')
            shape = get_args(shape)[1]
        elif isinstance(step, int):
            parts.append(f"[{step}]")
            shape = (get_args(shape) or (Any,))[0]
        else:
            parts.append(("." if parts else "") + str(step))
            shape = Any
    return "".join(parts) or "the body", holder


def _unwrap(shape: Any) -> Any:
    """``shape`` without ``Annotated``, and without ``None`` in a union."""
    while get_origin(shape) is Annotated:
        shape = get_args(shape)[0]
    if get_origin(shape) in (Union, UnionType):
        members = [a for a in get_args(shape) if a is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return shape


def _member(union: Any, tag: str) -> Any:
    """The member of ``union`` that pydantic's step ``tag`` names (``list[…]``: the
    list)."""
    members = [_unwrap(a) for a in get_args(union)]
    for member in members:
        name = getattr(get_origin(member) or member, "__name__", "")
        if tag == name or tag.startswith(name + "["):
            return member
    return next((m for m in members if get_origin(m) is None), Any)


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _pattern(ctx: Mapping[str, Any]) -> str:
    pattern = str(ctx.get("pattern", ""))
    if pattern in _PATTERNS:
        return _PATTERNS[pattern]
    found = _ID.match(pattern)
    if found:
        return f"must be 1 to {found[1]} letters, digits, '-' or '_'"
    return "is not in the form this field takes"


_SAY: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "missing": lambda _: "is required",
    "string_type": lambda _: "must be a JSON string",
    "int_type": lambda _: "must be a whole number",
    "int_parsing": lambda _: "must be a whole number",
    "int_from_float": lambda _: "must be a whole number",
    "bool_type": lambda _: "must be true or false",
    "bool_parsing": lambda _: "must be true or false",
    "list_type": lambda _: "must be a list",
    "dict_type": lambda _: "must be a JSON object",
    "model_type": lambda _: "must be a JSON object",
    "model_attributes_type": lambda _: "must be a JSON object",
    "string_too_short": lambda c: (
        "must not be empty"
        if c["min_length"] == 1
        else f"must be at least {_plural(c['min_length'], 'character')}"
    ),
    "string_too_long": lambda c: f"must be at most {_plural(c['max_length'], 'character')}",
    "too_short": lambda c: f"must have at least {_plural(c['min_length'], 'item')}",
    "too_long": lambda c: (
        f"must have at most {_plural(c['max_length'], 'item')}"
        + (f" (it has {c['actual_length']:,})" if c.get("actual_length") is not None else "")
    ),
    "string_pattern_mismatch": _pattern,
    "literal_error": lambda c: f"must be {c['expected']}",
    "enum": lambda c: f"must be {c['expected']}",
    "greater_than_equal": lambda c: f"must be at least {c['ge']:,}",
    "greater_than": lambda c: f"must be more than {c['gt']:,}",
    "less_than_equal": lambda c: f"must be at most {c['le']:,}",
    "less_than": lambda c: f"must be less than {c['lt']:,}",
}


def _sentence(error: ErrorDetails, field: str, holder: Any) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "value_error":
        # Our own validators' words, which name the field already.
        return str(ctx.get("error", error["msg"]))
    if kind == "extra_forbidden":
        allowed = ""
        if holder is not None:
            names = [i.alias or n for n, i in holder.model_fields.items()]
            allowed = f"; the fields here are {listed(names)}"
        return f"{field} is not a field of this request{allowed}"
    say = _SAY.get(kind)
    if say is None:
        # Not one we word ourselves: pydantic's words, about this field.
        return f"{field}: {error['msg']}"
    try:
        return f"{field} {say(ctx)}"
    except (KeyError, TypeError, ValueError):
        return f"{field}: {error['msg']}"


def invalid_body(model: type[BaseModel], error: ValidationError) -> InvalidBody:
    """``error`` as a 400 whose message names each field and what it may be, with
    pydantic's own words in ``details``."""
    sentences: dict[str, list[str]] = {}
    details = []
    for item in error.errors(include_url=False, include_input=False):
        field, holder = _walk(model, tuple(item["loc"]))
        if len(field) > _LONGEST_FIELD:  # a client's own key, quoted back
            field = field[: _LONGEST_FIELD - 1] + "…"
        said = _sentence(item, field, holder)
        if said not in sentences.setdefault(field, []):
            sentences[field].append(said)
        details.append({"field": field, "type": item["type"], "detail": item["msg"]})
    # A value that fits none of a union's forms fails each: one sentence for the field,
    # its forms joined by "or".
    joined = [
        ", or ".join([said[0], *(_after(field, more) for more in said[1:])])
        for field, said in sentences.items()
    ]
    if len(joined) > _MOST_PROBLEMS:
        joined[_MOST_PROBLEMS - 1 :] = [f"and {len(joined) - _MOST_PROBLEMS + 1} more problems"]
    return InvalidBody(
        "The request body is not valid: " + "; ".join(joined) + ".", details[:_MOST_DETAILS]
    )


def _after(field: str, sentence: str) -> str:
    """``sentence`` without the field's name it starts with."""
    return sentence.removeprefix(field + " ")
