"""The search page's form and results: a query string read as the arguments of ``search`` or
``recall`` (the same operations, checked by the same :func:`~stratamem.ops.bind`, as every
door), and their answer shaped for the template, each hit's score breakdown as bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stratamem.ops import OPERATIONS as TABLE

OPERATIONS = ("search", "recall")
MODES = ("hybrid", "keyword", "vector")
TYPES = TABLE["recall"].param("types").choices
SOURCE_KINDS = TABLE["search"].param("kinds").choices
# The legs a hit's breakdown may carry, in the order they are drawn.
LEGS = (
    "keyword",
    "vector",
    "graph",
    "context",
    "freshness",
    "expansion",
    "rerank",
    "bm25",
    "cosine",
)
BAR_WIDTH = 160  # the widest bar, in SVG units
# The form's text fields, as the operations name them.
TEXT_FIELDS = ("since", "until", "user", "session", "as_of")


@dataclass(frozen=True, slots=True)
class Form:
    """What the search form holds: the query string's fields, as sent (shown back escaped)."""

    query: str = ""
    operation: str = "search"
    mode: str = "hybrid"
    sources: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    fields: Mapping[str, str] = field(default_factory=dict)
    limit: str = "10"

    @classmethod
    def read(cls, params: Any) -> Form:
        """The form from a query string (a Starlette ``QueryParams``: ``get``/``getlist``)."""
        operation = params.get("op") or "search"
        mode = params.get("mode") or "hybrid"
        return cls(
            query=(params.get("q") or "").strip(),
            operation=operation if operation in OPERATIONS else "search",
            mode=mode if mode in MODES else "hybrid",
            sources=tuple(s for s in params.getlist("sources") if s),
            kinds=tuple(k for k in params.getlist("kinds") if k),
            types=tuple(t for t in params.getlist("types") if t),
            fields={k: (params.get(k) or "").strip() for k in TEXT_FIELDS},
            limit=(params.get("limit") or "10").strip(),
        )

    def arguments(self) -> dict[str, Any]:
        """The operation's arguments (empty fields left to their defaults; what cannot be
        read, a limit that is no number, left as text for ``bind`` to name)."""
        args: dict[str, Any] = {"query": self.query, "explain": True}
        if self.operation == "search":
            args["mode"] = self.mode
        else:
            if self.types:
                args["types"] = list(self.types)
            if self.fields.get("as_of"):
                args["as_of"] = self.fields["as_of"]
        if self.sources:
            args["sources"] = list(self.sources)
        if self.kinds:
            args["kinds"] = list(self.kinds)
        for name in ("since", "until", "user", "session"):
            if self.fields.get(name):
                args[name] = self.fields[name]
        if self.limit:
            args["limit"] = int(self.limit) if self.limit.isdigit() else self.limit
        return args


@dataclass(frozen=True, slots=True)
class Bar:
    """One leg of a hit's score: its name, value and drawn width."""

    name: str
    value: float
    width: float


@dataclass(frozen=True, slots=True)
class Hit:
    """A hit as the page shows it."""

    data: Mapping[str, Any]
    bars: tuple[Bar, ...]
    boost: float | None


def bars(breakdown: Mapping[str, Any] | None) -> tuple[tuple[Bar, ...], float | None]:
    """The bars of a breakdown (one per leg present and non-zero, widths against the largest
    of them and the final score) and its boost where it is not 1."""
    if not breakdown:
        return (), None
    present = [
        (name, float(breakdown[name]))
        for name in LEGS
        if isinstance(breakdown.get(name), int | float) and breakdown[name]
    ]
    final = breakdown.get("final")
    scale = max([abs(v) for _, v in present] + [abs(float(final)) if final else 0.0])
    drawn = tuple(
        Bar(name, value, round(BAR_WIDTH * abs(value) / scale, 1) if scale else 0.0)
        for name, value in present
    )
    boost = breakdown.get("boost")
    shown = float(boost) if isinstance(boost, int | float) and boost != 1 else None
    return drawn, shown


def hits(answer: Mapping[str, Any]) -> list[Hit]:
    """The answer's hits with their bars."""
    out = []
    for found in answer.get("hits", ()):
        drawn, boost = bars(found.get("breakdown"))
        out.append(Hit(found, drawn, boost))
    return out


def source_choices(sources: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The sources a reader may pick, as (value, label): the scope, and its kind."""
    out = []
    for source in sources:
        scope = str(source.get("scope") or source.get("id") or "")
        if scope:
            out.append((scope, f"{scope} ({source.get('kind', '')})"))
    return sorted(set(out))
