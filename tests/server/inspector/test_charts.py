"""The inspector's SVG charts: geometry in attributes, every text escaped, nothing the page's
Content-Security-Policy forbids (no inline style, no script, no event attribute)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from markupsafe import Markup

from stratamem.server.inspector.charts import Point, fact_timeline, mentions_chart, score_bars
from stratamem.server.inspector.views import FactEntry

HOSTILE = '<script>alert("x")</script>" onload="alert(1)'
T0 = datetime(2024, 3, 1, tzinfo=UTC)
NOW = datetime(2024, 5, 1, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def _fact(
    predicate: str,
    value: str,
    start: int | None,
    end: int | None,
    *,
    ended: str = "",
    expired: int | None = None,
    recorded: int = 0,
) -> FactEntry:
    return FactEntry(
        id=f"fact_{predicate}_{value}_{start}_{end}"[:40],
        subject="person:alice chen",
        predicate=predicate,
        value=value,
        value_is_entity=False,
        valid_from=None if start is None else T0 + timedelta(days=start),
        valid_to=None if end is None else T0 + timedelta(days=end),
        recorded_at=T0 + timedelta(days=recorded),
        expired_at=None if expired is None else T0 + timedelta(days=expired),
        source_id="src_1",
        origin="asserted",
        confidence=1.0,
        ended=ended,
    )


def _safe(chart: Markup) -> ET.Element:
    """The chart checked against the policy, parsed (so well formed)."""
    text = str(chart)
    assert isinstance(chart, Markup)
    # Within the tags (text is escaped, so a "<" starts a tag): no style, no handler.
    tags = " ".join(re.findall(r"<[^>]*>", text))
    assert not re.search(r"\sstyle\s*=", tags, re.I)
    assert not re.search(r"\son[a-z]+\s*=", tags, re.I)
    assert "<script" not in text.lower()
    root = ET.fromstring(text)
    for element in root.iter():
        assert element.tag != f"{SVG}script"
        assert not [a for a in element.attrib if a == "style" or a.startswith("on")]
    assert root.tag == f"{SVG}svg"
    assert root.get("role") == "img"
    assert root[0].tag == f"{SVG}title"
    assert root[0].text
    return root


def _rects(root: ET.Element) -> list[ET.Element]:
    return list(root.iter(f"{SVG}rect"))


def test_every_chart_escapes_what_it_is_given() -> None:
    charts = [
        mentions_chart([Point(HOSTILE, 3), Point("2024-03", 1)], title=HOSTILE),
        fact_timeline([_fact(HOSTILE, HOSTILE, 0, None)], now=NOW, title=HOSTILE),
        score_bars({HOSTILE: 0.5, "vector": 0.25}, title=HOSTILE),
    ]
    for chart in charts:
        root = _safe(chart)
        text = str(chart)
        assert "&lt;script&gt;" in text
        assert "&#34;" in text
        # What was given comes back whole, as text, never as markup.
        said = "".join(root.itertext())
        assert HOSTILE in said


def test_mention_bars_are_as_tall_as_their_counts() -> None:
    root = _safe(mentions_chart([Point("2024-03-01", 4), Point("2024-03-02", 0), Point("x", 2)]))
    heights = [float(r.get("height", "")) for r in _rects(root)]
    assert heights[0] == 2 * heights[2]
    assert heights[1] == 0
    titles = [r.find(f"{SVG}title").text for r in _rects(root)]  # type: ignore[union-attr]
    assert titles == ["2024-03-01: 4", "2024-03-02: 0", "x: 2"]
    assert "6 from 2024-03-01 to x" in (root[0].text or "")


def test_charts_of_nothing_say_so() -> None:
    for chart in (mentions_chart([]), fact_timeline([], now=NOW), score_bars({})):
        root = _safe(chart)
        assert (root[0].text or "").endswith(": none")
        assert _rects(root) == []


def test_the_fact_timeline_draws_each_value_over_its_valid_time() -> None:
    facts = [
        _fact("leads", "on-call", 0, None, ended="superseded", expired=10, recorded=0),
        _fact("leads", "on-call", 0, 10, ended="closed", recorded=10),
        _fact("leads", "release", 10, None, recorded=10),
        _fact("status", "away", None, 20, ended="retracted", expired=30, recorded=5),
    ]
    root = _safe(fact_timeline(facts, now=NOW))
    bars = {b.get("class", "").split()[-1]: b for b in _rects(root)}
    assert sorted(bars) == [
        "fact-bar-closed",
        "fact-bar-open",
        "fact-bar-retracted",
        "fact-bar-superseded",
    ]
    superseded, closed, release, retracted = (
        bars[f"fact-bar-{state}"] for state in ("superseded", "closed", "open", "retracted")
    )

    def x(bar: ET.Element) -> float:
        return float(bar.get("x", ""))

    def right(bar: ET.Element) -> float:
        return x(bar) + float(bar.get("width", ""))

    def y(bar: ET.Element) -> float:
        return float(bar.get("y", ""))

    # The closed row ends where the value that replaced it starts; open rows run to now.
    assert right(closed) == x(release)
    assert right(superseded) == right(release)
    # A value true since before anything known starts at the left edge, with the first time.
    assert x(retracted) == x(superseded)
    # One lane for what is believed of leads, one below for what no longer is; then status.
    assert y(closed) == y(release) < y(superseded) < y(retracted)
    said = {k: b.find(f"{SVG}title").text or "" for k, b in bars.items()}  # type: ignore[union-attr]
    assert (
        "recorded 2024-03-01 00:00:00, superseded 2024-03-11 00:00:00"
        in said["fact-bar-superseded"]
    )
    assert said["fact-bar-open"].startswith("leads: release (valid 2024-03-11 to now;")
    assert "retracted 2024-03-31" in said["fact-bar-retracted"]
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "chart-label"]
    assert labels[:2] == ["leads", "status"]
    values = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "fact-value"]
    assert sorted(values) == ["on-call", "release"]  # the values believed, written


def test_overlapping_values_take_lanes_of_their_own() -> None:
    facts = [
        _fact("likes", "tea", 0, None),
        _fact("likes", "coffee", 5, None),
        _fact("likes", "cocoa", 40, 50),
    ]
    root = _safe(fact_timeline(facts, now=NOW))
    ys = [float(b.get("y", "")) for b in _rects(root)]
    # Tea and coffee overlap from day 5 on; cocoa overlaps both.
    assert len(set(ys)) == 3


def test_score_bars_are_as_wide_as_their_values() -> None:
    root = _safe(score_bars({"keyword": 0.6, "vector": 0.3, "graph": 0.0, "odd": -1.0}))
    widths = [float(r.get("width", "")) for r in _rects(root)]
    assert widths[0] == 2 * widths[1]
    assert widths[2] == 0
    assert widths[3] == 0
    values = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "chart-value"]
    assert values == ["0.6000", "0.3000", "0.0000", "-1.0000"]
