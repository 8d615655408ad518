"""The evaluator the Terraform tests rely on gets HCL's answers on the forms they use."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.terraform.hcl import Config, EvalError, Ref, Scope, Unsupported, parse_type

CONFIG = Config(
    {
        "resource": {
            "google_x": {
                "one": {"name": '"n-${var.region}"', "block": [{"inner": "${var.n * 2}"}]},
                "many": {"for_each": '${toset(["a", "b"])}', "label": '"item-${each.key}"'},
            }
        },
        "data": {"google_project": {"this": {"project_id": '"p"'}}},
        "variable": {},
        "locals": {"twice": '"${local.base}${local.base}"', "base": '"ab"'},
    },
    Path("/nowhere"),
)


@pytest.fixture
def scope() -> Scope:
    return Scope(CONFIG, {"region": "europe-west2", "n": 4, "m": {"b": 2, "a": 1}})


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("${1 + 2 * 3}", 7),
        ("${(1 + 2) * 3}", 9),
        ("${!true || 2 >= 2 && 1 != 1}", False),
        ('${var.n > 3 ? "big" : "small"}', "big"),
        ('"x-${var.n}-${var.region}"', "x-4-europe-west2"),
        ('"$${literal} \\"quoted\\""', '${literal} "quoted"'),
        ('${[for k, v in var.m : "${k}=${v}"]}', ["a=1", "b=2"]),
        ("${{for k, v in var.m : v => k if v > 1}}", {"2": "b"}),
        ('${can(regex("^a+$", "aaa")) && !can(regex("^a+$", "ab"))}', True),
        ('${lookup({a = 1, "b-c" = 2}, "b-c", 0)}', 2),
        ("${local.twice}", "abab"),
        ("${google_x.one.name}", "n-europe-west2"),
        ("${google_x.one.block[0].inner}", 8),
        ('${google_x.many["b"].label}', "item-b"),
        ("${google_x.one.id}", Ref("google_x.one.id")),
        ('"id ${data.google_project.this.number}"', "id ${data.google_project.this.number}"),
        ("${data.google_project.this.project_id}", "p"),
    ],
)
def test_hcl_evaluates(scope: Scope, source: str, value: object) -> None:
    assert scope.eval(source) == value


@pytest.mark.parametrize("source", ["${var.nope}", '${1 + "a"}', "${true && 1}"])
def test_hcl_errors_where_terraform_does(scope: Scope, source: str) -> None:
    with pytest.raises(EvalError):
        scope.eval(source)


def test_hcl_refuses_what_it_does_not_know(scope: Scope) -> None:
    with pytest.raises(Unsupported):
        scope.eval("${timestamp()}")
    with pytest.raises(Unsupported):
        scope.eval("${[for x in var.m : x]...}")


def test_hcl_reads_type_constraints_with_optional_defaults() -> None:
    kind = parse_type("${object({a = optional(number, 3), b = optional(string), c = bool})}")
    assert kind.kind == "object"
    assert {k: (v.type.kind, v.optional, v.default) for k, v in kind.element.items()} == {
        "a": ("number", True, 3),
        "b": ("string", True, None),
        "c": ("bool", False, None),
    }
    assert parse_type("string").kind == "string"
    assert parse_type("${map(string)}").element.kind == "string"
