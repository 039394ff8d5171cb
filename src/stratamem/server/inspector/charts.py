"""The inspector's charts, drawn as inline SVG on the server.

Each function returns :class:`markupsafe.Markup` holding one ``<svg role="img">`` with a
``<title>`` that says what it shows. The page's Content-Security-Policy allows no inline style
and no script, so a chart is geometry in attributes only (``x``, ``y``, ``width``,
``height``) and ``class`` names the stylesheet colours (listed in :data:`CLASSES`); no
``style=`` attribute, no ``<script>``, no event attribute. Every text drawn (a label, a value,
a ``<title>``) is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

if TYPE_CHECKING:
    from stratamem.server.inspector.views import FactEntry

__all__ = ["CLASSES", "Point", "fact_timeline", "mentions_chart", "score_bars"]

CLASSES = (
    "chart",
    "chart-axis",
    "chart-bar",
    "chart-label",
    "chart-value",
    "chart-mentions",
    "chart-facts",
    "chart-scores",
    "fact-bar",
    "fact-bar-open",
    "fact-bar-closed",
    "fact-bar-superseded",
    "fact-bar-retracted",
    "fact-value",
    "score-bar",
)
"""The classes the charts draw with, for the stylesheet: ``fact-bar-superseded`` and
``fact-bar-retracted`` mark rows no longer believed (greyed, struck), ``fact-bar-open`` a value
true until now."""


@dataclass(frozen=True, slots=True)
class Point:
    """One bar of :func:`mentions_chart`: a label (``2024-03`` or ``2024-03-12``) and a count."""

    label: str
    count: int


_WIDTH = 640
_LABEL = 160  # the left margin of the fact timeline, where the predicates are written
_ROW = 24


def _svg(kind: str, title: str, width: int, height: int, body: list[str]) -> Markup:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {kind}" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f"<title>{escape(title)}</title>"
    )
    return Markup(head + "".join(body) + "</svg>")


def _n(value: float) -> str:
    """A coordinate: at most two decimals, no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def mentions_chart(points: Sequence[Point], *, title: str = "") -> Markup:
    """A bar per point, heights proportional to the counts (the largest fills the height),
    each bar's ``<title>`` its label and count; the first and last labels under the axis."""
    height, axis = 120, 100
    what = title or "mentions over time"
    if not points:
        return _svg("chart-mentions", f"{what}: none", _WIDTH, 24, [])
    top = max(p.count for p in points) or 1
    step = _WIDTH / len(points)
    gap = 1.0 if step > 3 else 0.0
    body = [f'<line class="chart-axis" x1="0" y1="{axis}" x2="{_WIDTH}" y2="{axis}"></line>']
    for i, point in enumerate(points):
        bar = (axis - 4) * point.count / top
        body.append(
            f'<rect class="chart-bar" x="{_n(i * step)}" y="{_n(axis - bar)}" '
            f'width="{_n(max(step - gap, 0.5))}" height="{_n(bar)}">'
            f"<title>{escape(point.label)}: {point.count}</title></rect>"
        )
    body.append(
        f'<text class="chart-label" x="0" y="{height - 4}">{escape(points[0].label)}</text>'
    )
    if len(points) > 1:
        body.append(
            f'<text class="chart-label" x="{_WIDTH}" y="{height - 4}" text-anchor="end">'
            f"{escape(points[-1].label)}</text>"
        )
    body.append(f'<text class="chart-value" x="{_WIDTH}" y="12" text-anchor="end">max {top}</text>')
    total = sum(p.count for p in points)
    span = f"{points[0].label} to {points[-1].label}"
    return _svg("chart-mentions", f"{what}: {total} from {span}", _WIDTH, height, body)


def fact_timeline(
    facts: Sequence[FactEntry], *, now: datetime | None = None, title: str = ""
) -> Markup:
    """Valid time across, one row per predicate: each value a bar from its ``valid_from``
    to its ``valid_to`` (or to ``now``, default the clock, while it holds), its class saying
    how it ended (``fact-bar-open``, ``-closed``, ``-superseded``, ``-retracted``), its
    ``<title>`` what it said, over which span, and when it was recorded and expired. A value
    true since before anything known starts at the left edge.

    In its predicate's row the values still believed come first, each with its value
    written above it, then those no longer believed as thinner bars below; values that
    overlap (of two sources, or of a predicate of many values) take lanes of their own."""
    now = now or datetime.now(UTC)
    what = title or "facts over valid time"
    if not facts:
        return _svg("chart-facts", f"{what}: none", _WIDTH, 24, [])
    times = [t for f in facts for t in (f.valid_from, f.valid_to, f.recorded_at) if t is not None]
    start = min(times)
    end = max([*times, now])
    if end <= start:
        end = start.replace(year=start.year + 1)
    span = (end - start).total_seconds()
    plot = _WIDTH - _LABEL - 8

    def x(when: datetime | None, default: datetime) -> float:
        moment = when or default
        return _LABEL + plot * (moment - start).total_seconds() / span

    groups: dict[str, list[FactEntry]] = {}
    for fact in facts:
        groups.setdefault(fact.predicate, []).append(fact)
    body: list[str] = []
    top = 0
    for predicate, members in groups.items():
        believed = _lanes([f for f in members if f.expired_at is None], x, start, now, text=True)
        expired = _lanes([f for f in members if f.expired_at is not None], x, start, now)
        height = max(_ROW, 4 + _BELIEVED * len(believed) + _EXPIRED * len(expired) + 4)
        body.append(
            f'<text class="chart-label" x="0" y="{top + 15}">{escape(_cut(predicate, 22))}'
            f"<title>{escape(predicate)}</title></text>"
        )
        lane_top = top + 4
        for lane in believed:
            for fact in lane:
                body += _fact_bar(fact, x(fact.valid_from, start), x(fact.valid_to, now), lane_top)
            lane_top += _BELIEVED
        for lane in expired:
            for fact in lane:
                body += _fact_bar(fact, x(fact.valid_from, start), x(fact.valid_to, now), lane_top)
            lane_top += _EXPIRED
        top += height
        body.append(
            f'<line class="chart-axis" x1="{_LABEL}" y1="{top}" x2="{_WIDTH - 8}" '
            f'y2="{top}"></line>'
        )
    body.append(f'<text class="chart-label" x="{_LABEL}" y="{top + 15}">{_day(start, "")}</text>')
    body.append(
        f'<text class="chart-label" x="{_WIDTH - 8}" y="{top + 15}" text-anchor="end">'
        f"{_day(end, '')}</text>"
    )
    return _svg("chart-facts", f"{what}: {len(facts)} rows", _WIDTH, top + 20, body)


_BELIEVED = 20  # a lane of values believed: the value written, its bar below
_EXPIRED = 8  # a lane of values no longer believed: a thin bar
_CHAR = 6.0  # about the width of a character of a value written, to keep lanes apart


def _lanes(
    facts: Sequence[FactEntry],
    x: Callable[[datetime | None, datetime], float],
    start: datetime,
    now: datetime,
    *,
    text: bool = False,
) -> list[list[FactEntry]]:
    """The facts put in lanes, earliest first, each in the first lane where it overlaps
    nothing (its written value included, where ``text``)."""
    lanes: list[list[FactEntry]] = []
    ends: list[float] = []
    for fact in sorted(facts, key=lambda f: (x(f.valid_from, start), f.id)):
        left, right = x(fact.valid_from, start), x(fact.valid_to, now)
        if text:
            right = max(right, left + _CHAR * len(_cut(fact.value, 40)) + 4)
        for i, taken in enumerate(ends):
            if taken <= left:
                lanes[i].append(fact)
                ends[i] = right
                break
        else:
            lanes.append([fact])
            ends.append(right)
    return lanes


def _fact_bar(fact: FactEntry, left: float, right: float, lane: int) -> list[str]:
    believed = fact.expired_at is None
    state = fact.ended or "open"
    says = f"{fact.predicate}: {fact.value}"
    valid = f"valid {_day(fact.valid_from, 'since ever')} to {_day(fact.valid_to, 'now')}"
    known = f"recorded {_stamp(fact.recorded_at)}"
    if fact.expired_at is not None:
        known += f", {state} {_stamp(fact.expired_at)}"
    y, tall = (lane + 11, 7) if believed else (lane + 1, 5)
    out = [
        f'<rect class="fact-bar fact-bar-{state}" x="{_n(left)}" y="{y}" '
        f'width="{_n(max(right - left, 2.0))}" height="{tall}">'
        f"<title>{escape(f'{says} ({valid}; {known})')}</title></rect>"
    ]
    if believed:
        out.append(
            f'<text class="fact-value" x="{_n(left + 1)}" y="{lane + 9}">'
            f"{escape(_cut(fact.value, 40))}</text>"
        )
    return out


def score_bars(parts: Mapping[str, float], *, title: str = "score by leg") -> Markup:
    """One bar per search leg (or any named part), widths proportional to the values (the
    largest fills the width; a negative one draws none), each value written beside it."""
    items = [(str(name), float(value)) for name, value in parts.items()]
    if not items:
        return _svg("chart-scores", f"{title}: none", _WIDTH, 24, [])
    top = max((v for _, v in items), default=0.0)
    plot = _WIDTH - _LABEL - 80
    body: list[str] = []
    for i, (name, value) in enumerate(items):
        y = i * 16
        width = plot * value / top if top > 0 and value > 0 else 0.0
        body.append(f'<text class="chart-label" x="0" y="{y + 11}">{escape(_cut(name, 24))}</text>')
        body.append(
            f'<rect class="score-bar" x="{_LABEL}" y="{y + 2}" width="{_n(width)}" '
            f'height="11"><title>{escape(name)}: {value:.4f}</title></rect>'
        )
        body.append(
            f'<text class="chart-value" x="{_n(_LABEL + width + 4)}" y="{y + 11}">'
            f"{value:.4f}</text>"
        )
    said = ", ".join(f"{name} {value:.4f}" for name, value in items)
    return _svg("chart-scores", f"{title}: {said}", _WIDTH, len(items) * 16, body)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _day(when: datetime | None, none: str) -> str:
    return none if when is None else when.astimezone(UTC).strftime("%Y-%m-%d")


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
