"""The canary store's inspector pages, read by every principal through a login session (see
``security_kit``): the search and recall pages list the same hits, in the same order, as the
same operation on the store built from only what the principal may see, and show nothing of
what it may not; the source menu offers only what it may see; a hidden node's page answers as
a missing one's, byte for byte but for the id. The sources, source, tree, entities and entity
pages equal, byte for byte, the same pages made from the store of what the principal may see
(a hidden source's, node's or entity's is the 404 of one that does not exist)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import route_probes as probes
import security_kit as kit
from security_kit import Refs
from serve_kit import Served, serve_copy

from stratamem import ops
from stratamem.errors import StratamemError
from stratamem.ops import MemoryContext
from stratamem.server.inspector import Inspector, browse
from suite import PATIENCE_S

PRINCIPALS = [p.name for p in kit.PRINCIPALS]
HIDEABLE = ("hr-secret", "legal-chat", "orphan")
QUERIES = (*probes.FEW, *probes.CANARY_QUERIES[::2])


@pytest.fixture(scope="module")
def served(  # type: ignore[no-untyped-def]
    world, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    with serve_copy(world, tmp_path_factory.mktemp("inspected")) as found:
        yield found


@contextmanager
def logged_in(served: Served, principal: str) -> Iterator[httpx.Client]:
    """A client of the served pages holding a login session of ``principal`` (no bearer)."""
    with httpx.Client(base_url=served.url, timeout=PATIENCE_S) as browser:
        form = browser.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf, form.text
        token = served.tokens[principal]
        answer = browser.post("/login", data={"token": token, "csrf": csrf[1]})
        assert answer.status_code == 303, answer.text
        yield browser


def pages(refs: Mapping[str, Refs]) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """(operation, page arguments, the named sources they name) for each page asked."""
    out: list[tuple[str, dict[str, Any], tuple[str, ...]]] = []
    for q in QUERIES:
        for mode in ("hybrid", "keyword", "vector"):
            out.append(("search", {"q": q, "mode": mode, "limit": "25"}, ()))
        out.append(("recall", {"q": q, "op": "recall", "limit": "25"}, ()))
    for _, sources, uses in probes._source_filters(probes.NAMED):
        for op in ("search", "recall"):
            args = {"q": probes.FEW[1], "op": op, "sources": list(sources), "limit": "25"}
            out.append((op, args, uses))
    return out


def _arguments(op: str, page: Mapping[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"query": page["q"], "limit": int(page["limit"]), "explain": True}
    if op == "search":
        args["mode"] = page.get("mode", "hybrid")
    if page.get("sources"):
        args["sources"] = list(page["sources"])
    return args


def _results(html: str) -> str:
    found = re.search(r'<section id="results".*?</section>', html, re.S)
    assert found, html[:500]
    return found.group(0)


def _scan(text: str, canaries: set[str], named: list[str]) -> list[str]:
    text = text.lower()
    for echo in sorted(named, key=len, reverse=True):
        text = text.replace(echo.lower(), "<named>")
    return sorted(c for c in canaries if c in text)


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_search_pages_equal_the_reduced_store_and_show_no_canary(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    reduced = world.read("reduced", principal)
    canaries = world.hidden_from(principal).canaries
    wrong = []
    with logged_in(served, principal) as browser:
        for op, page, uses in pages(refs):
            answer = browser.get("/search", params=page)
            label = f"{op} {page}"
            if answer.status_code != 200:
                wrong.append(f"{label}: {answer.status_code}")
                continue
            block = _results(answer.text)
            # The page shows back the query typed (the box, the title): the caller's own words.
            named = [*probes.echoes(refs, uses), page["q"]]
            found = _scan(answer.text, canaries, named)
            if found:
                wrong.append(f"{label} shows hidden {found}")
            try:
                want = ops.call(MemoryContext(reduced), op, _arguments(op, page))
            except (ValueError, StratamemError):  # refused: the page shows it as a line
                want = None
            shown = re.findall(r'<dd><a href="/nodes/([^"]+)">', block)
            if want is None:
                if '<p class="error"' not in block:
                    wrong.append(f"{label}: no error shown where the reduced store refuses")
            elif shown != [h["node_id"] for h in want["hits"]]:
                wrong.append(f"{label}: {shown[:5]} != {[h['node_id'] for h in want['hits']][:5]}")
            tally = kit.counts("inspector pages")
            tally.routes.add(op)
            tally.principals.add(principal)
            tally.compared += 1
            tally.checks += len(canaries)
    assert not wrong, f"{len(wrong)} wrong as {principal}:\n" + "\n".join(wrong[:10])


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_the_source_menu_offers_only_what_the_principal_sees(  # type: ignore[no-untyped-def]
    world, served: Served, principal: str
) -> None:
    spec = next(p for p in kit.PRINCIPALS if p.name == principal)
    want = sorted(s for v in kit.visible_specs(spec, kit.SPECS) for s in v.scopes)
    with logged_in(served, principal) as browser:
        page = browser.get("/search")
    menu = re.search(r'<select id="sources".*?</select>', page.text, re.S)
    assert menu
    assert sorted(re.findall(r'<option value="([^"]+)"', menu.group(0))) == want
    assert not _scan(page.text, world.hidden_from(principal).canaries, [])


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_a_hidden_nodes_page_is_a_missing_ones(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    hidden = world.hidden_from(principal).source_ids
    cases = [refs[n] for n in HIDEABLE if refs[n].source_id in hidden]
    assert cases, f"nothing named is hidden from {principal}"
    with logged_in(served, principal) as browser:
        for ref in cases:
            for part in ("leaf", "top", "summary"):
                ident = getattr(ref, part)
                missing = getattr(kit.NOWHERE, part)
                got = browser.get(f"/nodes/{ident}")
                want = browser.get(f"/nodes/{missing}")
                assert got.status_code == want.status_code == 404
                assert got.text.replace(ident, "<id>") == want.text.replace(missing, "<id>")
                assert ident not in got.text


# -- the sources, tree and entity pages -------------------------------------------------------


def browse_pages(refs: Mapping[str, Refs]) -> list[tuple[str, dict[str, str]]]:
    """(path, query) of the sources, tree and entity pages asked: every source of the world
    (by id and by scope) and its tree, the top, a summary and a leaf of the named sources, one
    source's tree asked for another's node, entity lists and entities, hidden ones included."""
    out: list[tuple[str, dict[str, str]]] = [("/sources", {}), ("/entities", {})]
    for spec in kit.SPECS:
        for scope in spec.scopes:
            ident = kit.source_id_for(scope)
            out += [(f"/sources/{ident}", {}), (f"/sources/{ident}/tree", {})]
            out.append((f"/sources/{quote(scope, safe='')}", {}))
    eng = refs["eng"].source_id
    for ref in refs.values():
        for node in (ref.top, ref.summary, ref.leaf):
            out.append((f"/sources/{ref.source_id}/tree", {"node": node}))
            out.append((f"/sources/{eng}/tree", {"node": node}))
    for q in (*probes.FEW, *probes.CANARY_QUERIES[::2], "e"):
        out.append(("/entities", {"q": q}))
    entities = {e for ref in refs.values() for e in ref.entities} | set(probes.ENTITIES)
    for entity in sorted(entities):
        out.append(("/entities/entity", {"id": entity}))
    return out


def page_of(memory: Any, path: str, query: Mapping[str, str]) -> browse.Shown:
    """The page ``path`` made by :mod:`browse` from ``memory``, as its route makes it."""
    parts = path.split("/")
    if path == "/sources":
        return browse.sources_page(memory)
    if path == "/entities":
        return browse.entities_page(memory, query.get("q", ""))
    if path == "/entities/entity":
        return browse.entity_page(memory, query.get("id", ""))
    source = parts[2].replace("%23", "#").replace("%3A", ":").replace("%2F", "/")
    if len(parts) == 4:
        return browse.tree_page(memory, source, query.get("node"))
    return browse.source_page(memory, source)


def page_name(path: str) -> str:
    parts = path.split("/")
    if path.startswith("/sources/"):
        return "tree" if len(parts) == 4 else "source"
    return "entity" if path == "/entities/entity" else parts[1]


@pytest.fixture(scope="module")
def templates() -> Any:
    """The inspector's template environment, with what the browsing pages register on it."""
    made = Inspector(SimpleNamespace(service=None), tokens_required=True)  # type: ignore[arg-type]
    browse.add_routes(made)
    return made.templates


def main_of(html: str) -> str:
    """The page's own part (not the header, which names the reader), the times a source was
    ingested masked: the two stores were built at two times."""
    found = re.search(r"<main>.*</main>", html, re.S)
    assert found, html[:500]
    steady = re.sub(r'<time datetime="[^"]*">[^<]*</time>', "<time>ingested</time>", found[0])
    return re.sub(r"<dt>Ingested</dt><dd>[^<]*</dd>", "<dt>Ingested</dt><dd></dd>", steady)


def rendered(templates: Any, shown: browse.Shown, *, may_write: bool = False) -> str:
    context: dict[str, Any] = {"who": None, "owner": False, "logins": True, "csrf": ""}
    context |= {"path": "/", "reader": None, "may_write": may_write}
    if shown.missing:
        context |= {"status": 404, "message": shown.missing}
    return main_of(templates.get_template(shown.template).render({**context, **shown.context}))


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_browsing_pages_equal_the_reduced_store_and_show_no_canary(  # type: ignore[no-untyped-def]
    world, refs, served: Served, templates, principal: str
) -> None:
    reduced = world.read("reduced", principal)
    canaries = world.hidden_from(principal).canaries
    wrong = []
    with logged_in(served, principal) as browser:
        for path, query in browse_pages(refs):
            label = f"{path} {query}"
            answer = browser.get(path, params=query)
            want = page_of(reduced, path, query)
            if answer.status_code != (404 if want.missing else 200):
                wrong.append(f"{label}: {answer.status_code}, want missing={want.missing!r}")
                continue
            # A writer's pages offer corrections too: compared whole, as the reduced store's.
            writes = 'class="corrections"' in answer.text
            if main_of(answer.text) != rendered(templates, want, may_write=writes):
                wrong.append(f"{label}: not the reduced store's page")
            # The page shows back what was typed (the entity box, a missing id's title).
            found = _scan(answer.text, canaries, [*query.values()])
            if found:
                wrong.append(f"{label} shows hidden {found}")
            tally = kit.counts("inspector pages")
            tally.routes.add(page_name(path))
            tally.principals.add(principal)
            tally.compared += 1
            tally.checks += len(canaries)
    assert not wrong, f"{len(wrong)} wrong as {principal}:\n" + "\n".join(wrong[:10])


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_a_hidden_nodes_correction_is_a_missing_ones(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    # Every principal of the served copy may write: it gets past the permission to the look-up.
    hidden = world.hidden_from(principal).source_ids
    cases = [refs[n] for n in HIDEABLE if refs[n].source_id in hidden]
    assert cases, f"nothing named is hidden from {principal}"
    with logged_in(served, principal) as browser:
        csrf = re.search(r'name="csrf" value="([^"]+)"', browser.get("/search").text)
        assert csrf
        for ref in cases:
            for part in ("leaf", "top"):
                ident = getattr(ref, part)
                missing = getattr(kit.NOWHERE, part)
                for fix in ("edit", "remove"):
                    for method in ("GET", "POST"):
                        data = {"csrf": csrf[1], "text": "x"} if method == "POST" else None
                        got = browser.request(method, f"/fix/{fix}?node={ident}", data=data)
                        want = browser.request(method, f"/fix/{fix}?node={missing}", data=data)
                        assert got.status_code == want.status_code == 404, got.text
                        assert got.text.replace(ident, "<id>") == want.text.replace(missing, "<id>")
                        assert ident not in got.text
                        assert not _scan(got.text, world.hidden_from(principal).canaries, [])
