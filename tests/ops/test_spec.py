"""The operation table: arguments checked once, one line per error, one name per parameter."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from typing import Any

import pytest

from stratamem.errors import InvalidArgument
from stratamem.ops import OPERATIONS, Operation, Param, bind, operation
from stratamem.ops.spec import REQUIRED

OP = Operation(
    name="probe",
    group="test",
    description="A probe.",
    params=(
        Param("query", "str", "Text.", min_length=1, max_length=20),
        Param("limit", "int", "A count.", default=10, ge=1, le=50),
        Param("since", "time", "A time.", default=None),
        Param("sources", "strs", "Names.", default=(), max_items=2),
        Param("mode", "str", "A choice.", default="a", choices=("a", "b")),
        Param("weight", "float", "A number.", default=None, gt=0),
        Param("whole", "bool", "A flag.", default=False),
    ),
    run=lambda context, args: args,
)


def test_defaults_are_filled_in_and_times_parsed() -> None:
    bound = bind(OP, {"query": "q", "since": "2024-03-12"})
    assert bound == {
        "query": "q",
        "limit": 10,
        "since": datetime(2024, 3, 12, tzinfo=UTC),
        "sources": [],
        "mode": "a",
        "weight": None,
        "whole": False,
    }
    assert bind(OP, {"query": "q", "sources": "one"})["sources"] == ["one"]
    assert bind(OP, {"query": "q", "limit": 3.0})["limit"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"query": "q", "entity": 1}, "probe: no parameter 'entity'"),
        ({"query": "q", "limt": 1}, "did you mean 'limit'?"),
        ({}, "probe: 'query' is required"),
        ({"query": 3}, "probe: 'query' must be text, got a number"),
        ({"query": "   "}, "probe: 'query' cannot be empty"),
        ({"query": "x" * 21}, "longer than 20 characters"),
        ({"query": "q", "limit": 0}, "probe: 'limit' must be at least 1"),
        ({"query": "q", "limit": 51}, "at most 50"),
        ({"query": "q", "limit": True}, "must be a whole number, got a boolean"),
        ({"query": "q", "limit": "5"}, "must be a whole number, got text"),
        ({"query": "q", "since": "2024-02-30"}, "probe: 'since' cannot be read as a time"),
        ({"query": "q", "since": 20240301}, "must be a date or time as text"),
        ({"query": "q", "sources": ["a", "b", "c"]}, "at most 2 items"),
        ({"query": "q", "sources": [1]}, "must hold texts only"),
        ({"query": "q", "mode": "c"}, "must be one of a, b"),
        ({"query": "q", "weight": 0}, "must be more than 0"),
        ({"query": "q", "weight": float("nan")}, "finite"),
        ({"query": "q", "whole": "yes"}, "must be true or false"),
        ({"query": None}, "'query' cannot be null"),
    ],
)
def test_a_bad_argument_is_one_line_naming_the_operation_and_the_parameter(
    args: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        bind(OP, args)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text
    assert isinstance(caught.value, ValueError)


def test_a_bad_argument_list_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="must be an object"):
        bind(OP, ["q"])  # type: ignore[arg-type]


def test_the_schema_takes_no_other_names_and_says_what_is_required() -> None:
    schema = OP.schema()
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "description": "A count.",
        "default": 10,
    }
    assert schema["properties"]["mode"]["enum"] == ["a", "b"]
    assert schema["properties"]["since"] == {"type": "string", "description": "A time."}


def test_an_unknown_operation_names_the_close_ones() -> None:
    with pytest.raises(InvalidArgument, match="did you mean 'search'"):
        operation("serch")


@pytest.mark.parametrize("op", OPERATIONS.values(), ids=lambda op: op.name)
def test_every_operation_is_declared_whole(op: Operation) -> None:
    assert op.name.isidentifier()
    assert op.name == op.name.lower()
    assert len(op.description) > 40, "a description a model can act on"
    assert op.access in ("read", "write", "owner")
    names = [p.name for p in op.params]
    assert len(names) == len(set(names))
    for param in op.params:
        assert param.help, f"{op.name}.{param.name} says what it is"
    for name in op.example:
        assert name in names, f"{op.name}'s example names {name!r}"
    method, path = op.shown_route
    assert method in ("GET", "POST", "DELETE")
    assert path.startswith("/v1/")
    for name in (part[1:-1] for part in path.split("/") if part.startswith("{")):
        assert op.param(name).required
    assert inspect.signature(op.run).parameters.keys() == {"ctx", "a"}


def test_one_concept_has_one_name_across_operations() -> None:
    """A parameter name means one thing: the same type wherever it appears."""
    seen: dict[str, Param] = {}
    for op in OPERATIONS.values():
        for param in op.params:
            first = seen.setdefault(param.name, param)
            assert param.type == first.type, f"{op.name}.{param.name} is a {param.type}"
    # The names an earlier door spelled otherwise are spelled one way now.
    for old in ("entity", "node_ids", "depth", "days", "fact"):
        assert old not in seen


def test_required_is_a_marker_not_a_value() -> None:
    assert OP.params[0].default is REQUIRED
    assert OP.params[0].required
    assert not OP.params[1].required


def test_the_reference_page_is_written_from_the_table() -> None:
    from pathlib import Path

    from stratamem.ops.reference import page

    written = Path(__file__).parents[2] / "docs" / "operations.md"
    assert written.read_text() == page(), (
        "docs/operations.md is behind the table: python -m stratamem.ops.reference > "
        "docs/operations.md"
    )


def test_a_time_default_given_as_text_is_a_time_when_the_call_is_bound() -> None:
    """``brief`` defaults to the last 24 hours: the default is read as a time at each call."""
    from datetime import timedelta

    bound = bind(OPERATIONS["brief"], {})
    assert isinstance(bound["since"], datetime)
    assert abs(datetime.now(UTC) - timedelta(hours=24) - bound["since"]) < timedelta(minutes=5)
