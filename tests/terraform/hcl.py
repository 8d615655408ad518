"""Read terraform/ with python-hcl2 and evaluate its expressions, without Terraform.

python-hcl2 parses the files; expressions come back as their source text. This module
evaluates that text with the values of the variables, the locals and the arguments of
the resources the configuration itself sets, so a test can ask "what URL does the queue
send tasks to?" and get ``https://spark-tasks-${data.google_project.this.number}...``.
What only exists after apply (an account's email, a function's URI) stays a ``Ref``,
which renders as ``${...}`` and compares by its address.

It covers the subset of HCL this configuration uses (operators, conditionals, ``for``
expressions, templates, the functions in ``FUNCTIONS``, type constraints with
``optional``); anything else raises ``Unsupported``, so a test cannot pass by accident.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
from hcl2 import SerializationOptions

OPTIONS = SerializationOptions(
    with_comments=False, explicit_blocks=False, wrap_objects=True, wrap_tuples=True
)


class Unsupported(Exception):
    """An expression outside the subset this evaluator knows."""


class EvalError(Exception):
    """What Terraform would report as an error while evaluating (caught by ``can``)."""


@dataclass(frozen=True)
class Ref:
    """A value known only after apply, by its address (``google_x.y.email``)."""

    path: str

    def __str__(self) -> str:
        return "${" + self.path + "}"


@dataclass(frozen=True)
class Type:
    """A type constraint: ``kind`` is string, number, bool, any, list, set, map or object."""

    kind: str
    element: Any = None  # Type of list/set/map elements; {name: Attr} for objects


@dataclass(frozen=True)
class Attr:
    type: Type
    optional: bool = False
    default: Any = None


# ---------------------------------------------------------------------------- tokens

_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_-]*)"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||=>|\.\.\.|[-+*/%<>!?:.,()\[\]{}=])"
    r"|(?P<quote>\"))"
)


def _scan_string(src: str, i: int) -> int:
    """Index just past the string whose opening quote is at ``i - 1``."""
    while i < len(src):
        c = src[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif src.startswith("$${", i):
            i += 3
        elif src.startswith("${", i):
            i = _scan_braces(src, i + 2)
        else:
            i += 1
    raise Unsupported(f"unterminated string in {src!r}")


def _scan_braces(src: str, i: int) -> int:
    """Index just past the ``}`` closing a ``${`` or ``{`` opened before ``i``."""
    depth = 1
    while i < len(src):
        c = src[i]
        if c == '"':
            i = _scan_string(src, i + 1)
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise Unsupported(f"unbalanced braces in {src!r}")


def tokenize(src: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i = 0
    while True:
        while i < len(src) and src[i].isspace():
            i += 1
        if i == len(src):
            return [*tokens, ("eof", "")]
        match = _TOKEN.match(src, i)
        if match is None:
            raise Unsupported(f"cannot read {src[i:]!r}")
        kind = match.lastgroup or ""
        if kind == "quote":
            end = _scan_string(src, match.end())
            tokens.append(("string", src[match.end() : end - 1]))
            i = end
        else:
            tokens.append((kind, match.group(kind)))
            i = match.end()


# ---------------------------------------------------------------------------- parser

Node = Callable[["Scope"], Any]

_BINARY: dict[str, tuple[int, Callable[[Any, Any], Any]]] = {
    "||": (1, lambda a, b: _bool(a) or _bool(b)),
    "&&": (2, lambda a, b: _bool(a) and _bool(b)),
    "==": (3, lambda a, b: _equal(a, b)),
    "!=": (3, lambda a, b: not _equal(a, b)),
    "<": (4, lambda a, b: _num(a) < _num(b)),
    ">": (4, lambda a, b: _num(a) > _num(b)),
    "<=": (4, lambda a, b: _num(a) <= _num(b)),
    ">=": (4, lambda a, b: _num(a) >= _num(b)),
    "+": (5, lambda a, b: _num(a) + _num(b)),
    "-": (5, lambda a, b: _num(a) - _num(b)),
    "*": (6, lambda a, b: _num(a) * _num(b)),
    "/": (6, lambda a, b: _num(a) / _num(b)),
    "%": (6, lambda a, b: _num(a) % _num(b)),
}


class Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.tokens = tokenize(src)
        self.at = 0

    def peek(self, offset: int = 0) -> tuple[str, str]:
        return self.tokens[min(self.at + offset, len(self.tokens) - 1)]

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if value is not None and token[1] != value:
            raise Unsupported(f"expected {value!r}, found {token[1]!r} in {self.src!r}")
        self.at += 1
        return token

    def accept(self, value: str) -> bool:
        if self.peek()[1] == value and self.peek()[0] == "op":
            self.at += 1
            return True
        return False

    def parse(self) -> Node:
        node = self.expression()
        if self.peek()[0] != "eof":
            raise Unsupported(f"unexpected {self.peek()[1]!r} in {self.src!r}")
        return node

    def expression(self) -> Node:
        condition = self.binary(1)
        if not self.accept("?"):
            return condition
        then = self.expression()
        self.take(":")
        otherwise = self.expression()
        return lambda s: then(s) if _bool(condition(s)) else otherwise(s)

    def binary(self, level: int) -> Node:
        left = self.unary()
        while True:
            kind, value = self.peek()
            if kind != "op" or value not in _BINARY or _BINARY[value][0] < level:
                return left
            self.take()
            precedence, apply = _BINARY[value]
            right = self.binary(precedence + 1)
            left = _binary_node(apply, left, right)

    def unary(self) -> Node:
        if self.accept("!"):
            operand = self.unary()
            return lambda s: not _bool(operand(s))
        if self.accept("-"):
            operand = self.unary()
            return lambda s: -_num(operand(s))
        return self.postfix(self.primary())

    def postfix(self, node: Node) -> Node:
        while True:
            if self.accept("."):
                name = self.take()[1]
                node = _step_node(node, name)
            elif self.peek() == ("op", "[") and self.peek(1) != ("op", "*"):
                self.take("[")
                index = self.expression()
                self.take("]")
                node = _index_node(node, index)
            else:
                return node

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "number":
            number = float(value)
            literal: Any = int(number) if number.is_integer() and "." not in value else number
            return lambda s: literal
        if kind == "string":
            return template(value)
        if kind == "ident":
            if value in ("true", "false", "null"):
                constant = {"true": True, "false": False, "null": None}[value]
                return lambda s: constant
            if self.peek() == ("op", "("):
                return self.call(value)
            return lambda s: s.name(value)
        if value == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if value == "[":
            return self.for_list() if self.peek() == ("ident", "for") else self.tuple()
        if value == "{":
            return self.for_object() if self.peek() == ("ident", "for") else self.object()
        raise Unsupported(f"unexpected {value!r} in {self.src!r}")

    def call(self, name: str) -> Node:
        self.take("(")
        args: list[Node] = []
        while not self.accept(")"):
            args.append(self.expression())
            if self.peek() == ("op", "..."):
                raise Unsupported("argument expansion")
            self.accept(",")
        if name in ("can", "try"):
            return _lazy_call(name, args)
        if name not in (*FUNCTIONS, *TYPE_FUNCTIONS, *FILE_FUNCTIONS):
            raise Unsupported(f"function {name}()")
        return lambda s: s.call(name, [arg(s) for arg in args])

    def tuple(self) -> Node:
        items: list[Node] = []
        while not self.accept("]"):
            items.append(self.expression())
            self.accept(",")
        return lambda s: [item(s) for item in items]

    def object(self) -> Node:
        items: list[tuple[Node, Node]] = []
        while not self.accept("}"):
            kind, value = self.peek()
            if kind == "ident" and self.peek(1)[1] in ("=", ":"):
                self.take()
                key: Node = (lambda name: lambda s: name)(value)
            else:
                key = self.expression()
            if not (self.accept("=") or self.accept(":")):
                raise Unsupported(f"object item without = in {self.src!r}")
            items.append((key, self.expression()))
            self.accept(",")
        return lambda s: {_key(k(s)): v(s) for k, v in items}

    def _for_head(self) -> tuple[str | None, str, Node]:
        self.take("for")
        first = self.take()[1]
        second = self.take()[1] if self.accept(",") else None
        self.take("in")
        collection = self.expression()
        self.take(":")
        return (first, second, collection) if second else (None, first, collection)

    def for_list(self) -> Node:
        key_name, value_name, collection = self._for_head()
        body = self.expression()
        condition = self.expression() if self.peek() == ("ident", "if") and self.take() else None
        self.take("]")

        def run(s: Scope) -> list[Any]:
            out = []
            for inner in _iterate(s, collection(s), key_name, value_name):
                if condition is None or _bool(condition(inner)):
                    out.append(body(inner))
            return out

        return run

    def for_object(self) -> Node:
        key_name, value_name, collection = self._for_head()
        key = self.expression()
        self.take("=>")
        value = self.expression()
        condition = self.expression() if self.peek() == ("ident", "if") and self.take() else None
        self.take("}")

        def run(s: Scope) -> dict[str, Any]:
            out = {}
            for inner in _iterate(s, collection(s), key_name, value_name):
                if condition is None or _bool(condition(inner)):
                    out[_key(key(inner))] = value(inner)
            return out

        return run


def _binary_node(apply: Callable[[Any, Any], Any], left: Node, right: Node) -> Node:
    # Terraform evaluates both sides of && and || (no short circuit), errors included.
    return lambda s: apply(left(s), right(s))


def _step_node(node: Node, name: str) -> Node:
    return lambda s: s.step(node(s), name)


def _index_node(node: Node, index: Node) -> Node:
    return lambda s: s.index(node(s), index(s))


def _lazy_call(name: str, args: list[Node]) -> Node:
    def run(s: Scope) -> Any:
        for arg in args:
            try:
                value = arg(s)
            except EvalError:
                continue
            return True if name == "can" else value
        if name == "can":
            return False
        raise EvalError("no argument of try() could be evaluated")

    return run


def _iterate(
    scope: Scope, collection: Any, key_name: str | None, value_name: str
) -> Iterator[Scope]:
    if isinstance(collection, dict):
        pairs: list[tuple[Any, Any]] = sorted(collection.items())
    elif isinstance(collection, frozenset):
        pairs = [(v, v) for v in sorted(collection)]
    elif isinstance(collection, list):
        pairs = list(enumerate(collection))
    else:
        raise EvalError(f"cannot iterate over {collection!r}")
    for key, value in pairs:
        names = {value_name: value}
        if key_name is not None:
            names[key_name] = key
        yield scope.with_names(names)


def template(raw: str) -> Node:
    """A string template: literal text and ``${expr}`` interpolations."""
    parts: list[Node | str] = []
    i = 0
    literal = ""
    while i < len(raw):
        if raw.startswith("$${", i):
            literal += "${"
            i += 3
        elif raw.startswith("${", i):
            end = _scan_braces(raw, i + 2)
            if literal:
                parts.append(literal)
                literal = ""
            parts.append(Parser(raw[i + 2 : end - 1]).parse())
            i = end
        elif raw[i] == "\\":
            escaped = raw[i + 1]
            literal += {"n": "\n", "t": "\t", "r": "\r"}.get(escaped, escaped)
            i += 2
        else:
            literal += raw[i]
            i += 1
    if literal or not parts:
        parts.append(literal)
    if len(parts) == 1 and not isinstance(parts[0], str):
        return parts[0]  # "${x}" is x itself, unconverted
    return lambda s: "".join(p if isinstance(p, str) else _text(p(s)) for p in parts)


# ---------------------------------------------------------------------------- values


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise EvalError(f"a bool is required, not {value!r}")
    return value


def _num(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EvalError(f"a number is required, not {value!r}")
    return value


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def _key(value: Any) -> str:
    if isinstance(value, (Ref, dict, list)):
        raise EvalError(f"an object key must be a string, not {value!r}")
    return _text(value)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, _Address):
        return str(value.ref())
    if isinstance(value, (str, int, float, Ref)):
        return str(value)
    raise EvalError(f"cannot turn {value!r} into a string")


def _regex(pattern: str, text: str) -> Any:
    match = re.search(pattern, _text(text))
    if match is None:
        raise EvalError(f"{pattern!r} does not match {text!r}")
    if match.re.groupindex:
        return match.groupdict()
    return list(match.groups()) if match.groups() else match.group(0)


def _lookup(mapping: dict[str, Any], key: str, *default: Any) -> Any:
    if key in mapping:
        return mapping[key]
    if default:
        return default[0]
    raise EvalError(f"no {key!r} in {mapping!r}")


def _merge(*maps: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mapping in maps:
        if not isinstance(mapping, dict):
            raise EvalError(f"merge() takes objects, not {mapping!r}")
        out.update(mapping)
    return out


def _tostring(value: Any) -> Any:
    return value if isinstance(value, Ref) else _text(value)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "alltrue": lambda items: all(_bool(i) for i in items),
    "base64encode": lambda text: base64.b64encode(_text(text).encode()).decode(),
    "jsonencode": lambda value: json.dumps(value, separators=(",", ":")),
    "anytrue": lambda items: any(_bool(i) for i in items),
    "contains": lambda items, value: value in items,
    "endswith": lambda text, suffix: _text(text).endswith(suffix),
    "floor": lambda n: math.floor(_num(n)),
    "keys": lambda mapping: sorted(mapping),
    "length": lambda items: len(items),
    "lookup": _lookup,
    "lower": lambda text: _text(text).lower(),
    "merge": _merge,
    "regex": _regex,
    "replace": lambda text, old, new: _text(text).replace(old, new),
    "setproduct": lambda *sets: [list(p) for p in itertools.product(*(sorted(s) for s in sets))],
    "startswith": lambda text, prefix: _text(text).startswith(prefix),
    "tostring": _tostring,
    "toset": lambda items: frozenset(items),
    "trimsuffix": lambda text, suffix: _text(text).removesuffix(suffix),
    "values": lambda mapping: [mapping[k] for k in sorted(mapping)],
}
TYPE_FUNCTIONS = ("object", "optional", "list", "set", "map", "tuple")
FILE_FUNCTIONS = ("file", "fileexists", "filesha256")  # relative to terraform/


# ---------------------------------------------------------------------------- types


def parse_type(value: Any) -> Type:
    """The type constraint of a variable (``string``, ``object({...})``, ...)."""
    source = _source(value) if value is not None else "any"
    return _as_type(Parser(source).parse()(Scope(Config({}, Path(".")), {}, types=True)))


def _as_type(value: Any) -> Type:
    if isinstance(value, Type):
        return value
    raise Unsupported(f"not a type: {value!r}")


def convert(kind: Type, value: Any) -> Any:
    """``value`` as Terraform would hold it once converted to ``kind`` (optional object
    attributes filled with their defaults); raises EvalError where Terraform would."""
    if value is None:
        return None
    if kind.kind == "any":
        return value
    if kind.kind == "string":
        if isinstance(value, (dict, list)):
            raise EvalError(f"a string is required, not {value!r}")
        return _text(value)
    if kind.kind == "number":
        return _num(value)
    if kind.kind == "bool":
        return _bool(value)
    if kind.kind in ("list", "set"):
        items = [convert(kind.element, v) for v in value]
        return frozenset(items) if kind.kind == "set" else items
    if kind.kind == "map":
        return {k: convert(kind.element, v) for k, v in dict(value).items()}
    if not isinstance(value, dict):
        raise EvalError(f"an object is required, not {value!r}")
    unknown = set(value) - set(kind.element)
    if unknown:
        raise EvalError(f"unexpected attributes {sorted(unknown)}")
    out = {}
    for name, attr in kind.element.items():
        if name in value:
            out[name] = convert(attr.type, value[name])
        elif attr.optional:
            out[name] = convert(attr.type, attr.default)
        else:
            raise EvalError(f"attribute {name!r} is required")
    return out


def _type_call(name: str, args: list[Any]) -> Any:
    if name == "optional":
        return Attr(_as_type(args[0]), True, args[1] if len(args) > 1 else None)
    if name == "object":
        attrs = {k: v if isinstance(v, Attr) else Attr(_as_type(v)) for k, v in args[0].items()}
        return Type("object", attrs)
    if name in ("list", "set", "map"):
        return Type(name, _as_type(args[0]))
    raise Unsupported(f"type {name}()")


# ---------------------------------------------------------------------------- config


def _source(value: Any) -> str:
    """The HCL source of an attribute's value as python-hcl2 gives it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
        inner = value[2:-1]
        try:
            tokenize(inner)
            return inner
        except Unsupported:
            return value
    if isinstance(value, str):
        return value
    raise Unsupported(f"not an expression: {value!r}")


def _label(raw: str) -> str:
    return raw[1:-1] if raw.startswith('"') and raw.endswith('"') else raw


@dataclass
class Config:
    """Every block of terraform/: ``blocks["resource"]["google_x"]["y"]`` is its body."""

    blocks: dict[str, Any]
    root: Path
    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path) -> Config:
        blocks: dict[str, Any] = {"resource": {}, "data": {}, "variable": {}, "locals": {}}
        blocks.update({"output": {}, "terraform": [], "provider": {}})
        files = {}
        for path in sorted(root.glob("*.tf")):
            files[path.name] = path.read_text()
            with path.open() as handle:
                parsed = hcl2.load(handle, serialization_options=OPTIONS)
            for kind in ("resource", "data"):
                for item in parsed.get(kind, []):
                    for type_, named in item.items():
                        for name, body in named.items():
                            blocks[kind].setdefault(_label(type_), {})[_label(name)] = body
            for kind in ("variable", "output", "provider"):
                for item in parsed.get(kind, []):
                    blocks[kind].update({_label(k): v for k, v in item.items()})
            for item in parsed.get("locals", []):
                blocks["locals"].update(item)
            blocks["terraform"].extend(parsed.get("terraform", []))
        return cls(blocks, root.resolve(), files)

    def resource(self, type_: str, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self.blocks["resource"][type_][name]
        return body

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.blocks["resource"].get(type_, {})
        return found

    def defaults(self, **overrides: Any) -> dict[str, Any]:
        """Each variable's value: its default converted to its type, or the override."""
        values = {}
        for name, body in self.blocks["variable"].items():
            kind = parse_type(body.get("type"))
            if name in overrides:
                raw = overrides[name]
            elif "default" in body:
                raw = Scope(self, {}).eval(body["default"])
            else:
                raise EvalError(f"variable {name} has no default: pass it")
            values[name] = convert(kind, raw)
        return values

    def scope(
        self, functions: dict[str, Callable[..., Any]] | None = None, **variables: Any
    ) -> Scope:
        return Scope(self, self.defaults(**variables), functions=functions or {})


class Scope:
    """What names mean while evaluating: variables, locals, ``path``, loop names, and
    resources (their configured arguments, else a ``Ref``)."""

    def __init__(
        self,
        config: Config,
        variables: dict[str, Any],
        names: dict[str, Any] | None = None,
        functions: dict[str, Callable[..., Any]] | None = None,
        types: bool = False,
    ) -> None:
        self.config = config
        self.variables = variables
        self.names = names or {}
        self.functions = functions or {}
        self.types = types
        self._locals: dict[str, Any] = {}

    def with_names(self, names: dict[str, Any]) -> Scope:
        inner = Scope(
            self.config, self.variables, {**self.names, **names}, self.functions, self.types
        )
        inner._locals = self._locals
        return inner

    def eval(self, value: Any) -> Any:
        """The value of an attribute as python-hcl2 gives it (a literal or source text)."""
        return _finalize(Parser(_source(value)).parse()(self))

    def call(self, name: str, args: list[Any]) -> Any:
        if self.types or name in TYPE_FUNCTIONS:
            return _type_call(name, args)
        args = [_finalize(arg) for arg in args]
        if name in self.functions:
            return self.functions[name](*args)
        if name in FILE_FUNCTIONS:
            return _file_function(name, self.config.root, args[0])
        return FUNCTIONS[name](*args)

    def name(self, name: str) -> Any:
        if self.types:
            if name in ("string", "number", "bool", "any"):
                return Type(name)
            raise Unsupported(f"type {name}")
        if name in self.names:
            return self.names[name]
        if name in ("var", "local", "path", "data", "each", "count"):
            return _Root(name)
        return _Address(name, ())

    def local(self, name: str) -> Any:
        if name not in self._locals:
            if name not in self.config.blocks["locals"]:
                raise EvalError(f"no local.{name}")
            self._locals[name] = Scope(self.config, self.variables, {}, self.functions).eval(
                self.config.blocks["locals"][name]
            )
        return self._locals[name]

    def step(self, value: Any, name: str) -> Any:
        if isinstance(value, _Root):
            return self._root_step(value.name, name)
        if isinstance(value, _Address):
            return value.extend(self, name)
        if isinstance(value, Ref):
            return Ref(f"{value.path}.{name}")
        if isinstance(value, dict):
            if name not in value:
                raise EvalError(f"no attribute {name!r} in {value!r}")
            return value[name]
        raise EvalError(f"cannot take .{name} of {value!r}")

    def index(self, value: Any, key: Any) -> Any:
        if isinstance(value, _Address):
            return value.extend(self, key, index=True)
        if isinstance(value, Ref):
            shown = f'"{key}"' if isinstance(key, str) else key
            return Ref(f"{value.path}[{shown}]")
        try:
            return value[key]
        except (KeyError, IndexError, TypeError):
            raise EvalError(f"no [{key!r}] in {value!r}") from None

    def _root_step(self, root: str, name: str) -> Any:
        if root == "var":
            if name not in self.variables:
                raise EvalError(f"no var.{name}")
            return self.variables[name]
        if root == "local":
            return self.local(name)
        if root == "path":
            return str(self.config.root)
        if root in ("each", "count"):
            key = f"{root}.{name}"
            if key not in self.names:
                raise EvalError(f"{key} outside a for_each/count block")
            return self.names[key]
        return _Address("data." + name, ())


@dataclass(frozen=True)
class _Root:
    name: str


@dataclass(frozen=True)
class _Address:
    """A reference being walked: ``google_x``, then ``google_x.y``, then its arguments."""

    kind: str
    steps: tuple[Any, ...]

    def extend(self, scope: Scope, step: Any, index: bool = False) -> Any:
        steps = (*self.steps, (step, index))
        kind = "data" if self.kind.startswith("data.") else "resource"
        type_ = self.kind.removeprefix("data.")
        if len(steps) < 2:
            return _Address(self.kind, steps)
        body = scope.config.blocks[kind].get(type_, {}).get(steps[0][0])
        if body is None:
            raise EvalError(f"no {kind} {type_}.{steps[0][0]}")
        value = _resolve(scope, self.kind, body, list(steps))
        return _Address(self.kind, steps) if value is _BLOCK else value

    def ref(self) -> Ref:
        return Ref(_address_text(self.kind, list(self.steps)))


_BLOCK = object()  # the walk ended on a block (or the resource): more steps may follow


def _finalize(value: Any) -> Any:
    """A reference that ended on a block is the block's address."""
    if isinstance(value, _Address):
        return value.ref()
    if isinstance(value, _Root):
        raise EvalError(f"{value.name} on its own")
    return value


def _address_text(kind: str, steps: list[tuple[Any, bool]]) -> str:
    text = kind
    for step, index in steps:
        text += (
            f'["{step}"]'
            if index and isinstance(step, str)
            else f"[{step}]"
            if index
            else (f".{step}")
        )
    return text


def _resolve(scope: Scope, kind: str, body: dict[str, Any], steps: list[tuple[Any, bool]]) -> Any:
    """Walk a resource's own arguments as far as the configuration sets them."""
    names: dict[str, Any] = {}
    rest = steps[1:]
    if "for_each" in body and rest and rest[0][1]:
        each = Scope(scope.config, scope.variables, {}, scope.functions).eval(body["for_each"])
        key = rest[0][0]
        value = each[key] if isinstance(each, dict) else key
        names = {"each.key": key, "each.value": value}
        rest = rest[1:]
    elif "count" in body and rest and rest[0][1]:
        names = {"count.index": rest[0][0]}
        rest = rest[1:]
    node: Any = body
    if not rest:
        return _BLOCK
    for position, (step, index) in enumerate(rest):
        if isinstance(node, list) and index:
            node = node[step]
            if position == len(rest) - 1:
                return _BLOCK
            continue
        if isinstance(node, dict) and not index and step in node:
            node = node[step]
            if isinstance(node, list) and node and isinstance(node[0], dict):
                if position == len(rest) - 1:
                    return _BLOCK
                continue
            value = Scope(scope.config, scope.variables, names, scope.functions).eval(node)
            for later, later_index in rest[position + 1 :]:
                value = (scope.index if later_index else scope.step)(value, later)
            return value
        return Ref(_address_text(kind, steps))
    return Ref(_address_text(kind, steps))


def _file_function(name: str, root: Path, path: str) -> Any:
    target = (root / path) if not Path(path).is_absolute() else Path(path)
    if name == "fileexists":
        return target.is_file()
    if not target.is_file():
        raise EvalError(f"no file {target}")
    if name == "filesha256":
        return hashlib.sha256(target.read_bytes()).hexdigest()
    return target.read_text()


def dynamic_blocks(scope: Scope, block: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The blocks ``dynamic "name"`` makes inside ``block``: each ``content`` with its
    arguments evaluated (the iterator named ``name`` bound to each element)."""
    out = []
    for dynamic in block.get("dynamic", []):
        for label, body in dynamic.items():
            if _label(label) != name:
                continue
            for key, value in _pairs(scope.eval(body["for_each"])):
                inner = scope.with_names({name: {"key": key, "value": value}})
                (content,) = body["content"]
                out.append({k: _evaluated(inner, v) for k, v in content.items()})
    return out


def _evaluated(scope: Scope, value: Any) -> Any:
    """An argument evaluated, or a nested block (a list of bodies) with its arguments."""
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [{k: _evaluated(scope, v) for k, v in body.items()} for body in value]
    return scope.eval(value)


def _pairs(collection: Any) -> list[tuple[Any, Any]]:
    if isinstance(collection, dict):
        return sorted(collection.items())
    if isinstance(collection, frozenset):
        return [(v, v) for v in sorted(collection)]
    return list(enumerate(collection))
