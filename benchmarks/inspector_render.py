"""The inspector's time to first render of search results at 100k chunks, beside the JSON API
on the same server, the same store and the same queries, interleaved; the weight of each of
its pages; and that each page shows its content with script off.

The store: one of about 100k chunks, built by ``disk_build.py --keep`` (SciFact's abstracts
repeated over 20 sources, each copy's vector the original's plus small noise; see its
docstring), copied to a scratch folder here so that nothing is written beside the original.
The queries: SciFact's test claims (the first ``--queries``).

The server: ``create_app`` over a ``Service`` of that store with the bundled MiniLM embedder,
without tokens (every page reads as the owner), served by uvicorn on loopback in this process
and warmed (``Service.warm``). The browser: headless Chromium through Selenium, started as the
browser tests start it (``tests/browser/browsing.py``: the system's binaries, no network).

For each query, in an order that rotates from query to query (so the machine's drifting load
falls on all alike):

- page: ``GET /search?q=…`` (the search form's defaults: operation search, mode hybrid,
  limit 10, explained), timed by the client (httpx) from the request to the last byte;
- api: ``POST /v1/search`` with the same arguments, timed the same way;
- operation: the ``search`` operation with the same arguments, bound and run in process
  as its route runs it (the operation's own time: no HTTP, no rendering);
- browser: the same page loaded in Chromium, its Navigation Timing read: the wait for the
  response (``responseStart - requestStart``) and ``domContentLoadedEventEnd`` (from the
  start of the navigation: the first render's parsed page, its deferred htmx run).

Each query's embedding is cached by the embedder after its first use; the first of the four
calls of a query pays for it, and the rotation spreads that over all four alike.

Page weight: each page's HTML, and each asset it names or loaded in Chromium (Resource
Timing: stylesheet, script, icon), fetched and counted in bytes as sent (no compression).
Script off: each page loaded in a second Chromium with script off, its main heading and the
content it exists to show present.

    python benchmarks/inspector_render.py --store /tmp/insp100k.db [--queries 48]

Writes ``benchmarks/results/inspector_render.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from run_info import CPUS, clock, git_state, machine, write_results
from stratamem.embed.registry import get_embedder
from stratamem.eval import load_dataset
from stratamem.ops import OPERATIONS, bind
from stratamem.server.http import create_app
from stratamem.server.inspector import views
from stratamem.server.service import Service, ServiceContext

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / sub) for sub in ("browser", "server", "")]
import browsing  # noqa: E402  (the browser tests' own driver module)
import serving  # noqa: E402  (the tests' live server)

DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
LIMIT = 10
VARIANTS = ("page", "api", "operation", "browser")


# -- the server --------------------------------------------------------------------------------


@contextmanager
def served(service: Service) -> Iterator[str]:
    """The owner's server over ``service`` on a free loopback port, as the tests serve it."""
    with serving.live(create_app(service, tokens_required=False, access_log=None)) as base:
        yield base


# -- one query, four ways ----------------------------------------------------------------------


def timed_get(client: httpx.Client, url: str) -> tuple[float, int]:
    started = time.perf_counter()
    answer = client.get(url)
    elapsed = time.perf_counter() - started
    answer.raise_for_status()
    return elapsed * 1000, len(answer.content)


def timed_api(client: httpx.Client, query: str) -> float:
    body = {"query": query, "mode": "hybrid", "explain": True, "limit": LIMIT}
    started = time.perf_counter()
    answer = client.post("/v1/search", json=body)
    elapsed = time.perf_counter() - started
    answer.raise_for_status()
    return elapsed * 1000


def timed_operation(service: Service, query: str) -> float:
    """The ``search`` operation of the table run as its route runs it (bound, then run in
    the owner's context), in process: no HTTP, no rendering."""
    op = OPERATIONS["search"]
    args = bind(op, {"query": query, "mode": "hybrid", "explain": True, "limit": LIMIT})
    started = time.perf_counter()
    op.run(ServiceContext(service, None), args)
    return (time.perf_counter() - started) * 1000


NAVIGATION = """
const n = performance.getEntriesByType('navigation')[0];
return {wait: n.responseStart - n.requestStart, dcl: n.domContentLoadedEventEnd - n.startTime,
        load: n.loadEventEnd - n.startTime};
"""


def timed_browser(driver: Any, url: str) -> tuple[dict[str, float], str]:
    """The page's Navigation Timing, and what it said where it shows no hit ('' if it does)."""
    driver.get(url)
    timing = driver.execute_script(NAVIGATION)
    said = ""
    if not driver.find_elements("css selector", "#results .hit"):
        shown = driver.find_elements("css selector", "#results, main")
        said = (shown[0].text if shown else driver.title)[:200] or "an empty page"
    return {k: float(v) for k, v in timing.items()}, said


def run_queries(
    service: Service, base: str, driver: Any, queries: list[str], say: Callable[[str], None]
) -> dict[str, Any]:
    times: dict[str, list[float]] = {v: [] for v in (*VARIANTS, "browser_wait", "browser_load")}
    page_bytes: list[int] = []
    no_hits: list[dict[str, str]] = []
    with httpx.Client(base_url=base, timeout=600) as client:
        for i, query in enumerate(queries):
            url = f"{base}/search?q={quote(query)}"
            order = VARIANTS[i % 4 :] + VARIANTS[: i % 4]
            for variant in order:
                if variant == "page":
                    ms, size = timed_get(client, url)
                    times["page"].append(ms)
                    page_bytes.append(size)
                elif variant == "api":
                    times["api"].append(timed_api(client, query))
                elif variant == "operation":
                    times["operation"].append(timed_operation(service, query))
                else:
                    timing, said = timed_browser(driver, url)
                    if said:
                        no_hits.append({"query": query, "said": said})
                    times["browser"].append(timing["dcl"])
                    times["browser_wait"].append(timing["wait"])
                    times["browser_load"].append(timing["load"])
            if (i + 1) % 10 == 0:
                say(f"{i + 1} queries")
    return {"ms": times, "page_bytes": page_bytes, "no_hits": no_hits}


def summary(values: list[float], digits: int = 1) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), digits),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], digits),
        "mean": round(statistics.fmean(ordered), digits),
    }


# -- every page --------------------------------------------------------------------------------


def page_paths(service: Service, query: str) -> dict[str, str]:
    """Each page of the inspector, at an address that shows something in this store."""
    with service.reading(None) as memory:
        hit = memory.search(query, limit=1).hits[0]
        source = views.sources(memory)[0].id
        top = views.tree(memory, source, None)
        entities = views.entities(memory, "")
    tree_node = top.children[0].id if top is not None and top.children else None
    paths = {
        "search (empty)": "/",
        "search (results)": f"/search?q={quote(query)}",
        "node": f"/nodes/{quote(hit.node_id)}",
        "sources": "/sources",
        "source": f"/sources/{quote(source)}",
        "tree": f"/sources/{quote(source)}/tree",
        "entities": "/entities",
    }
    if tree_node is not None:
        paths["tree (a summary)"] = f"/sources/{quote(source)}/tree?node={quote(tree_node)}"
    if entities:
        paths["entity"] = f"/entities/entity?id={quote(entities[0].id)}"
    return paths


# The assets a page loaded (Resource Timing) or names (a stylesheet, a script, an icon, an
# image): the page's weight is its HTML and each of these, fetched.
ASSETS = """
const named = [...document.querySelectorAll('link[href], script[src], img[src]')]
  .map(e => e.href || e.src);
const loaded = performance.getEntriesByType('resource').map(r => r.name);
return [...new Set([...named, ...loaded])];
"""


def asset_kind(url: str) -> str:
    path = url.split("?")[0]
    return "css" if path.endswith(".css") else "js" if path.endswith(".js") else "other"


# What each page exists to show, by CSS selector: present with script off.
CONTENT = {
    "search (empty)": "form.search",
    "search (results)": "#results .hit",
    "node": "pre.text",
    "sources": "table.sources tbody tr",
    "source": "dl.source",
    "tree": "ol.tree-children li",
    "tree (a summary)": "pre.summary-text",
    "entities": "table.entities tbody tr",
    "entity": "dl.entity",
}


def weigh_pages(
    base: str, paths: dict[str, str], driver: Any, client: httpx.Client
) -> dict[str, Any]:
    pages: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for name, path in paths.items():
        fetched = [timed_get(client, base + path) for _ in range(3)]
        driver.get(base + path)
        timing = driver.execute_script(NAVIGATION)
        weight = {"html": fetched[0][1], "css": 0, "js": 0, "other": 0}
        for url in driver.execute_script(ASSETS):
            if url not in sizes:
                sizes[url] = timed_get(client, url)[1]
            weight[asset_kind(url)] += sizes[url]
        pages[name] = {
            "path": path if len(path) < 80 else path[:77] + "...",
            "server_ms": round(statistics.median(ms for ms, _ in fetched), 1),
            "dcl_ms": round(float(timing["dcl"]), 1),
            "bytes": weight,
            "total_bytes": sum(weight.values()),
        }
    return pages


def without_script(base: str, paths: dict[str, str], driver: Any) -> dict[str, bool]:
    shown: dict[str, bool] = {}
    for name, path in paths.items():
        driver.get(base + path)
        heading = driver.find_elements("tag name", "h1")
        content = driver.find_elements("css selector", CONTENT[name])
        shown[name] = bool(heading and heading[0].text and content)
    return shown


# -- the report --------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    s = report["search"]
    lines = [
        "# Inspector: time to first render, page weight, script off",
        "",
        "`python benchmarks/inspector_render.py` (see its docstring for what is timed).",
        f"Run {report['date']} on {m['cpus_used']} CPUs, load average (1 min) "
        f"{m['load_start'][0]} at the start and {m['load_end'][0]} at the end; code "
        f"{report['code']['head'][:12]}{' (modified)' if report['code']['modified'] else ''}"
        f"{' — ' + report['code']['note'] if report['code'].get('note') else ''}.",
        f"Store: {report['store']['chunks']:,} chunks over {report['store']['sources']} sources "
        f"({report['store']['built_by']}). Queries: the first {report['queries']} SciFact test "
        "claims, each run four ways in a rotating order; the browser is headless Chromium.",
        "The machine is shared and loaded: compare the ratios, which were measured interleaved.",
        "",
        "## Search results: time to first render",
        "",
        "| measured | median ms | p90 ms | mean ms | median ÷ API |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    api = s["api"]["median"]
    labels = {
        "operation": "the `search` operation in process (no HTTP)",
        "api": "`POST /v1/search` (JSON), client time",
        "page": "`GET /search?q=` (HTML page), client time",
        "browser_wait": "browser: request to first byte",
        "browser": "browser: `domContentLoaded` from navigation start",
        "browser_load": "browser: `load` from navigation start",
    }
    for key, label in labels.items():
        row = s[key]
        lines.append(
            f"| {label} | {row['median']} | {row['p90']} | {row['mean']} | "
            f"{row['median'] / api:.2f} |"
        )
    lines += [
        "",
        f"The page over the API: median per-query ratio {report['page_over_api']['median']:.2f} "
        f"(p90 {report['page_over_api']['p90']:.2f}); the page's HTML is "
        f"{report['search_page_kb']:.1f} KB median. Browser loads that showed no hit: "
        f"{len(report['browser_pages_without_hits'])} of {report['queries']}"
        + "".join(f"; {n['said']!r}" for n in report["browser_pages_without_hits"][:3])
        + ".",
        "",
        "## Each page: server time, first render, weight",
        "",
        "Server time: the median of three client fetches of the page (HTML only). First render:"
        " `domContentLoaded` in Chromium. Weight: bytes of the HTML and of each stylesheet, script"
        " and icon it names or loaded, fetched (no compression; other: the icon).",
        "",
        "| page | server ms | domContentLoaded ms | HTML KB | CSS KB | JS KB | other KB | total KB"
        " | content with script off |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, page in report["pages"].items():
        b = page["bytes"]
        lines.append(
            f"| {name} | {page['server_ms']} | {page['dcl_ms']} | {b['html'] / 1024:.1f} | "
            f"{b['css'] / 1024:.1f} | {b['js'] / 1024:.1f} | {b['other'] / 1024:.1f} | "
            f"{page['total_bytes'] / 1024:.1f} | "
            f"{'yes' if report['script_off'][name] else '**no**'} |"
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a store of about 100k chunks")
    parser.add_argument("--built-by", default="disk_build.py --documents 56500 --no-lancedb")
    parser.add_argument("--queries", type=int, default=48, help="a multiple of 4")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--code-note", default="", help="what code ran, where not this checkout")
    args = parser.parse_args()
    say = clock()
    load_start = os.getloadavg()
    queries = [q.text for q in load_dataset(DATA / "scifact").queries_in("test")][: args.queries]
    work = Path(tempfile.mkdtemp(prefix="inspector-render-"))
    binaries = browsing.find_binaries()
    try:
        store = work / "store.db"
        shutil.copy(args.store, store)
        embedder = get_embedder("minilm", threads=CPUS)
        with Service(str(store), embedder=embedder) as service:
            say(f"warming the service ({service.warm():.1f} s)")
            with service.reading(None) as memory:
                conn = memory.store.conn
                chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
                sources = conn.execute("SELECT count(*) FROM sources").fetchone()[0]
            browser = browsing.start(binaries).driver
            quiet = browsing.start(binaries, javascript=False).driver
            try:
                with served(service) as base:
                    say(f"serving {chunks:,} chunks at {base}; {len(queries)} queries")
                    timed = run_queries(service, base, browser, queries, say)
                    paths = page_paths(service, queries[0])
                    with httpx.Client(timeout=600) as client:
                        pages = weigh_pages(base, paths, browser, client)
                    script_off = without_script(base, paths, quiet)
            finally:
                browser.quit()
                quiet.quit()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ms = timed["ms"]
    ratios = [p / a for p, a in zip(ms["page"], ms["api"], strict=True)]
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": {**git_state(), "note": args.code_note},
        "store": {"chunks": chunks, "sources": sources, "built_by": args.built_by},
        "queries": len(queries),
        "search": {key: summary(values) for key, values in ms.items()},
        "page_over_api": summary(ratios, 3),
        "search_page_kb": round(statistics.median(timed["page_bytes"]) / 1024, 1),
        "browser_pages_without_hits": timed["no_hits"],
        "pages": pages,
        "script_off": script_off,
        "raw_ms": ms,
    }
    write_results(args.out, "inspector_render", report, render(report))


if __name__ == "__main__":
    main()
