"""How an operation is declared: its parameters, who may call it, and how a call's arguments
are checked.

An :class:`Operation` is declared once (see :mod:`stratamem.ops.table`); every door is built
from it: the HTTP route and the MCP tool take its parameters under the same names, with the
same limits, and the same :func:`bind` checks them, so a bad argument gets the same one-line
error on every door. That error names the operation, the parameter and the rule, never the
value given (a server must not hand a caller's text back). The JSON schema a door publishes
is :meth:`Operation.schema`.

Parameter types (:attr:`Param.type`):

=========  ==================================================================================
``str``    text; ``min_length``/``max_length`` bound it, ``choices`` list the values allowed
``int``    a whole number (not a boolean); ``ge``/``le`` bound it
``float``  a number; ``gt``/``ge``/``le`` bound it
``bool``   true or false
``time``   an ISO 8601 date or time (``2024-03-12``, ``2024-03-12T09:00Z``) or a span back
           from now (``24h``, ``7d``); a :class:`~datetime.datetime` from Python
``strs``   a list of texts (``max_items``); one text is taken as a list of one
``object`` a JSON object (``dict``)
``objects`` a list of JSON objects (``max_items``)
=========  ==================================================================================
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from stratamem.errors import InvalidArgument
from stratamem.timeparse import parse_when

if TYPE_CHECKING:
    from stratamem.ops.context import Context

Access = Literal["read", "write", "owner"]
ParamType = Literal["str", "int", "float", "bool", "time", "strs", "object", "objects"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
MAX_TEXT = 100_000
TIME_FORMS = "2024-03-12, 2024-03-12T09:30, 24h, 7d or 2w"


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of an operation: one name on every door."""

    name: str
    type: ParamType
    help: str
    default: Any = REQUIRED
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    max_items: int | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False  # None is a value (``null`` in JSON), not only the default

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def schema(self) -> dict[str, Any]:
        """The parameter's JSON schema: its type, choices, numeric bounds and default. Lengths
        and counts are checked by :func:`bind` and named in its errors, but left out of what
        a model is shown, where they would cost tokens on every call for a rare mistake."""
        out: dict[str, Any] = {}
        if self.type == "str":
            out["type"] = "string"
            if self.choices:
                out["enum"] = list(self.choices)
        elif self.type == "time":
            out["type"] = "string"
        elif self.type in ("int", "float"):
            out["type"] = "integer" if self.type == "int" else "number"
            for key, bound in (("minimum", self.ge), ("exclusiveMinimum", self.gt)):
                if bound is not None:
                    out[key] = bound
            if self.le is not None:
                out["maximum"] = self.le
        elif self.type == "bool":
            out["type"] = "boolean"
        elif self.type == "strs":
            out["type"] = "array"
            out["items"] = {
                "type": "string",
                **({"enum": list(self.choices)} if self.choices else {}),
            }
            if self.max_items is not None:
                out["maxItems"] = self.max_items
        elif self.type == "object":
            out["type"] = "object"
        else:
            out["type"] = "array"
            out["items"] = {"type": "object"}
        if self.nullable:
            out = {"anyOf": [out, {"type": "null"}]}
        out["description"] = self.help
        if not self.required and self.default not in (None, ()):
            out["default"] = list(self.default) if isinstance(self.default, tuple) else self.default
        return out


Run = Callable[["Context", dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Operation:
    """One thing a caller can do, on every door: its name, parameters, who may call it,
    a description written for a model, an example, and what runs it (``run``: the call's
    context and its bound arguments → the JSON result)."""

    name: str
    group: str
    description: str
    params: tuple[Param, ...]
    run: Run
    access: Access = "read"
    example: Mapping[str, Any] = field(default_factory=dict)
    http: tuple[str, str] | None = None  # (method, path) where not POST /v1/<name>
    destructive: bool = False
    query_param: str | None = "query"  # the argument an access log may show
    # The doors' names where they are not the operation's: the CLI command that runs it
    # (``fact add``; None: one is made from this declaration) and the Python method
    # (``facts.remember``, on :class:`~stratamem.api.Memory`).
    cli: str | None = None
    python: str | None = None

    @property
    def reads(self) -> bool:
        return self.access == "read"

    @property
    def route(self) -> tuple[str, str]:
        """The HTTP method and path as routed (a ``{source:path}`` takes slashes)."""
        return self.http or ("POST", f"/v1/{self.name}")

    @property
    def shown_route(self) -> tuple[str, str]:
        """:attr:`route` as a reader (and the OpenAPI document) writes it: ``{source}``."""
        method, path = self.route
        return method, re.sub(r"{(\w+):\w+}", r"{\1}", path)

    def param(self, name: str) -> Param:
        for found in self.params:
            if found.name == name:
                return found
        raise KeyError(name)

    def schema(self) -> dict[str, Any]:
        """The JSON schema of the operation's arguments (no other names are accepted)."""
        return {
            "type": "object",
            "properties": {p.name: p.schema() for p in self.params},
            "required": [p.name for p in self.params if p.required],
            "additionalProperties": False,
        }


def bind(op: Operation, args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``args`` checked against ``op``'s parameters, with the defaults filled in and times
    parsed; :class:`~stratamem.errors.InvalidArgument` (one line, naming the operation and the
    parameter) for a name it does not take, a missing one, or a value of the wrong type or
    out of bounds."""
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise InvalidArgument(f"{op.name}: the arguments must be an object of named values")
    known = {p.name for p in op.params}
    for name in args:
        if name not in known:
            raise InvalidArgument(f"{op.name}: no parameter {name!r}{_close(name, known)}")
    out: dict[str, Any] = {}
    for param in op.params:
        if param.name in args:
            out[param.name] = _check(op, param, args[param.name])
        elif param.required:
            raise InvalidArgument(f"{op.name}: {param.name!r} is required ({param.help})")
        else:
            default = param.default
            if param.type == "time" and isinstance(default, str):
                default = as_time(default, where=f"{op.name}: {param.name!r}")  # "24h": now
            out[param.name] = list(default) if isinstance(default, tuple) else default
    return out


def _close(name: str, known: set[str]) -> str:
    """A hint for a name not taken: the names it is part of (``days`` →
    ``time_window_days``), else the close spellings, else every name taken."""
    text = str(name)
    found = sorted(k for k in known if text in k.split("_") or k in text.split("_"))
    if not found:
        found = difflib.get_close_matches(text, sorted(known), n=3, cutoff=0.5)
    if found:
        return ": did you mean " + " or ".join(repr(f) for f in found[:3]) + "?"
    return ": it takes " + ", ".join(sorted(known)) if known else ": it takes none"


def _check(op: Operation, param: Param, value: Any) -> Any:
    where = f"{op.name}: {param.name!r}"
    if value is None:
        if param.nullable or param.default is None:
            return None
        if not param.required and param.type == "strs":
            return []
        raise InvalidArgument(f"{where} cannot be null")
    kind = param.type
    if kind == "str":
        if not isinstance(value, str):
            raise InvalidArgument(f"{where} must be text, got {_shown(value)}")
        if param.choices and value not in param.choices:
            allowed = ", ".join(param.choices)
            raise InvalidArgument(f"{where} must be one of {allowed}")
        _text(where, value)
        _length(where, value, param)
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise InvalidArgument(f"{where} must be a whole number, got {_shown(value)}")
        _bounds(where, value, param)
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidArgument(f"{where} must be a number, got {_shown(value)}")
        if not math.isfinite(value):
            raise InvalidArgument(f"{where} must be a finite number")
        _bounds(where, value, param)
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise InvalidArgument(f"{where} must be true or false, got {_shown(value)}")
        return value
    if kind == "time":
        return as_time(value, where=where)
    if kind == "strs":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, Sequence) or isinstance(items, bytes):
            raise InvalidArgument(f"{where} must be a list of texts, got {_shown(value)}")
        for item in items:
            if not isinstance(item, str):
                raise InvalidArgument(f"{where} must hold texts only, got {_shown(item)}")
            if param.choices and item not in param.choices:
                allowed = ", ".join(param.choices)
                raise InvalidArgument(f"{where} must hold only {allowed}")
            _text(where, item)
            _length(where, item, param)
        _items(where, items, param)
        return list(items)
    if kind == "object":
        if not isinstance(value, Mapping):
            raise InvalidArgument(f"{where} must be an object, got {_shown(value)}")
        return dict(value)
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidArgument(f"{where} must be a list of objects, got {_shown(value)}")
    _items(where, value, param)
    return list(value)


def as_time(value: Any, *, where: str) -> datetime:
    """A time argument: a datetime as it is, or a text parsed as the CLI parses it."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise InvalidArgument(f"{where} must be a date or time as text, got {_shown(value)}")
    try:
        return parse_when(value)
    except ValueError:
        raise InvalidArgument(f"{where} cannot be read as a time; use {TIME_FORMS}") from None


def _text(where: str, value: str) -> None:
    """Refuse a lone surrogate (JSON's ``"\\ud800"``): no store, index or model takes it."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(
                f"{where} is not valid text: a lone surrogate at character {exc.start}"
            ) from None


def _length(where: str, value: str, param: Param) -> None:
    if param.min_length is not None and len(value.strip()) < param.min_length:
        raise InvalidArgument(
            f"{where} cannot be empty"
            if param.min_length == 1
            else f"{where} needs at least {param.min_length} characters"
        )
    limit = param.max_length or MAX_TEXT
    if len(value) > limit:
        raise InvalidArgument(f"{where} is longer than {limit} characters")


def _items(where: str, items: Sequence[Any], param: Param) -> None:
    if param.max_items is not None and len(items) > param.max_items:
        raise InvalidArgument(f"{where} takes at most {param.max_items} items, got {len(items)}")


def _bounds(where: str, value: float, param: Param) -> None:
    if param.ge is not None and value < param.ge:
        raise InvalidArgument(f"{where} must be at least {param.ge:g}")
    if param.gt is not None and value <= param.gt:
        raise InvalidArgument(f"{where} must be more than {param.gt:g}")
    if param.le is not None and value > param.le:
        raise InvalidArgument(f"{where} must be at most {param.le:g}")


def _shown(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "text",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)
