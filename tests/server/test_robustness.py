"""The server under abuse: clients that vanish mid-request, bodies that lie about their length
or are not the JSON they claim, and a server killed with SIGKILL in the middle of an ingest.

None of it may be answered 500 or logged as an unexpected error, and the server keeps serving:
a search after the abuse answers exactly as it did before. A write whose caller went away runs
to its end; a killed one leaves every source of the ingest whole or absent, the data stored
before it untouched, and a second run of the same ingest completes the store to exactly what
one uninterrupted ingest gives.

Servers run in a thread (``serving.live``) over stores embedded with the hashing embedder,
on each backend (a SQLite file, a PostgreSQL database: what is checked of the stored data is
read with plain SQL both take); the killed one is ``stratamem serve`` in a process of its
own. The bulk input is generated: one JSON Lines file of many sources (one transaction
each), long enough to be caught part-way.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from serving import live, server_layer_only

import stratamem
from stratamem.api import Memory
from stratamem.server.http import MAX_BODY_BYTES, create_app
from stratamem.server.service import Service
from stratamem.store.urls import shown_location
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S, PastTheStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")},
    "PYTHONPATH": str(Path(stratamem.__file__).parents[1]),
}
DEADLINE_S = PATIENCE_S
QUERY = {"query": "redis maxmemory evictions", "limit": 5}

# The bulk input: SOURCES sources of LINES chat lines each, one JSON Lines file.
SOURCES = 12
LINES = 1000
BULK = "jsonl:bulk-"
WORDS = ("alpha", "beta", "gamma", "delta", "queue", "sqlite", "lease", "seal", "tree", "worker")


# -- data --------------------------------------------------------------------------------------


def chat_line(source: int, n: int) -> str:
    """Line ``n`` of bulk source ``source``: 97 s apart, an hour's silence after every 40."""
    return json.dumps(
        {
            "id": f"s{source}m{n}",
            "source": f"bulk-{source:02d}",
            "kind": "chat",
            "timestamp": 1_700_000_000 + n * 97 + n // 40 * 3600,
            "author": ("alice", "bob", "carol")[n % 3],
            "text": " ".join(WORDS[(n * k + source) % len(WORDS)] for k in range(1, 9))
            + f" n{n} s{source}",
        }
    )


def is_postgres(db: str) -> bool:
    return "://" in db


def connected(db: str, *, read_only: bool = False) -> Any:
    """A connection to ``db`` of its own, outside any store: ``sqlite3`` on a file, the
    PostgreSQL store's connection (which takes the same SQL) on a URL; close it when done."""
    if is_postgres(db):
        from stratamem.store.postgres.connection import connect

        return PastTheStore(connect(db, application="stratamem-test"))
    if read_only:
        return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=PATIENCE_S)
    return sqlite3.connect(db)


def rows(conn: Any, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in conn.execute(sql, args))


def snapshot(db: str, *, trees: bool = True) -> dict[str, Any]:
    """Every source's stored content by scope: its records, chunks and (``trees``) live
    summaries as sorted rows; wall-clock fields left out."""
    with closing(connected(db)) as conn:
        out: dict[str, Any] = {}
        for sid, scope, kind in conn.execute("SELECT id, scope, kind FROM sources"):
            out[scope] = {
                "id": sid,
                "kind": kind,
                "records": rows(conn, "SELECT key, digest FROM records WHERE source_id = ?", sid),
                "chunks": rows(
                    conn, "SELECT id, seq, content FROM chunks WHERE source_id = ?", sid
                ),
            }
            if trees:
                out[scope]["summaries"] = rows(
                    conn,
                    "SELECT level, content FROM summaries WHERE source_id = ? AND deleted = 0",
                    sid,
                )
        return out


def check_integrity(db: str) -> None:
    if is_postgres(db):
        # PostgreSQL enforces the foreign keys itself; what stands for the full-text index
        # is the keyword statistics its triggers keep, which must add the chunks up.
        with closing(connected(db)) as pg:
            assert rows(pg, "SELECT docs, content, title FROM keyword_stats") == rows(
                pg,
                "SELECT count(*), coalesce(sum(terms_content), 0), "
                "coalesce(sum(terms_title), 0) FROM chunks",
            )
        return
    with closing(sqlite3.connect(db)) as conn:
        assert rows(conn, "PRAGMA integrity_check") == [("ok",)]
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        assert rows(conn, "PRAGMA foreign_key_check") == []
        chunks, indexed = conn.execute(
            "SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM chunks_fts_docsize)"
        ).fetchone()
        assert chunks == indexed


def committed_bulk_sources(db: str) -> int:
    """How many bulk sources a reader sees committed, on a connection of its own."""
    with closing(connected(db, read_only=True)) as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM sources WHERE scope LIKE ?", (BULK + "%",)
            ).fetchone()[0]
        )


def wait_for(what: str, found: Callable[[], Any]) -> Any:
    """Poll ``found`` until it gives something true; fail after the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while not (value := found()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)
    return value


@dataclass(frozen=True, slots=True)
class Stores:
    """A store holding the Slack export (``base``), the bulk input, and what the base holds
    once the bulk input is ingested into it (``full``), and before (``before``)."""

    base: str
    bulk: Path
    before: dict[str, Any]
    full: dict[str, Any]
    locations: Any  # the suite's ``locations``, which copies a store on either backend

    def copy(self, folder: Path) -> str:
        folder.mkdir(parents=True, exist_ok=True)
        return str(self.locations.copy(self.base, folder, "store"))


@pytest.fixture(scope="module")
def stores(
    tmp_path_factory: pytest.TempPathFactory, served_location: str, locations: Any
) -> Stores:
    folder = tmp_path_factory.mktemp("robustness")
    base = served_location
    with stratamem.open(base, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.indexes.embed()
    bulk = folder / "bulk.jsonl"
    with bulk.open("w") as fh:
        for source in range(SOURCES):
            fh.writelines(chat_line(source, n) + "\n" for n in range(LINES))
    whole = locations.copy(base, folder, "whole")
    with stratamem.open(whole, embedder=None) as memory:
        memory.ingest(bulk, parallel=False)
    full = snapshot(whole)
    assert sum(scope.startswith(BULK) for scope in full) == SOURCES
    return Stores(base, bulk, snapshot(base), full, locations)


# -- what the server logs ----------------------------------------------------------------------


class Watch(logging.Handler):
    """The access lines of a server and every error it logs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.access: list[str] = []
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == ACCESS.name:
            self.access.append(record.getMessage())
        elif record.levelno >= logging.ERROR:
            self.errors.append(f"{record.name}: {record.getMessage()}")

    def requests(self) -> list[tuple[str, str, int]]:
        """Every request logged so far: method, path and status."""
        found = [LINE.match(line) for line in self.access]
        assert all(found), self.access
        return [(m[1], m[2], int(m[3])) for m in found if m]

    def lines(self, method: str, path: str) -> list[int]:
        """The statuses logged for ``method path``, in order."""
        return [status for m, p, status in self.requests() if (m, p) == (method, path)]

    def assert_clean(self) -> None:
        assert not self.errors, self.errors
        assert not [r for r in self.requests() if r[2] >= 500], self.access


LINE = re.compile(r"^(\S+) (.+) (\d{3}) [\d.]+ms \S+")
ACCESS = logging.getLogger("tests.server.robustness.access")
WATCHED = ("uvicorn.error", "stratamem.server")


@contextmanager
def served(service: Service, **options: Any) -> Iterator[tuple[str, Watch]]:
    """``service`` served by an app without tokens on a live server, watched."""
    watch = Watch()
    ACCESS.addHandler(watch)
    ACCESS.setLevel(logging.INFO)
    ACCESS.propagate = False
    app = create_app(service, tokens_required=False, access_log=ACCESS, **options)
    try:
        with live(app) as url:
            # uvicorn sets its loggers up as the server starts: watch them from then on.
            for name in WATCHED:
                logging.getLogger(name).addHandler(watch)
            try:
                yield url, watch
            finally:
                for name in WATCHED:
                    logging.getLogger(name).removeHandler(watch)
    finally:
        ACCESS.removeHandler(watch)


# -- raw HTTP ----------------------------------------------------------------------------------


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def http_request(path: str, body: bytes, *, length: int | None = None, extra: bytes = b"") -> bytes:
    """A POST of ``body`` as JSON, announcing ``length`` bytes (default: the body's own)."""
    size = len(body) if length is None else length
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\nContent-Length: {size}\r\n".encode()
        + extra
        + b"\r\n"
        + body
    )


def chunked_request(path: str, chunked_body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + chunked_body
    )


def send_and_drop(url: str, raw: bytes, *, reset: bool = False) -> None:
    """Send ``raw`` and close at once, without reading; ``reset`` closes with a TCP reset."""
    with socket.create_connection(address(url), timeout=PATIENCE_S) as sock:
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.sendall(raw)


def exchange(url: str, raw: bytes, *, half_close: bool = False) -> bytes:
    """Send ``raw`` (then stop sending, with ``half_close``) and read until the server
    closes; what it sent."""
    with socket.create_connection(address(url), timeout=DEADLINE_S) as sock:
        sock.sendall(raw)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = []
        while data := sock.recv(65536):
            received.append(data)
    return b"".join(received)


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def assert_error_body(content_type: str, body: bytes) -> dict[str, Any]:
    assert content_type.startswith("application/json"), body
    found = json.loads(body)
    assert set(found) == {"error"}
    assert found["error"]["code"]
    assert found["error"]["message"]
    assert b"Traceback" not in body
    return found["error"]  # type: ignore[no-any-return]


# -- a read-only server, abused ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reader:
    url: str
    watch: Watch
    answer: dict[str, Any]  # the search QUERY answered before any abuse

    def assert_serving(self) -> None:
        """A normal search answers as it did before any abuse."""
        with httpx.Client(base_url=self.url, timeout=DEADLINE_S) as client:
            assert client.get("/healthz").json() == {"status": "ok"}
            response = client.post("/v1/search", json=QUERY)
        assert response.status_code == 200, response.text
        assert response.json() == self.answer

    def settle(self, method: str, path: str, count: int) -> list[int]:
        """Wait until ``count`` requests to ``method path`` have been logged; their statuses."""
        return wait_for(  # type: ignore[no-any-return]
            f"{count} {method} {path} lines",
            lambda: (found := self.watch.lines(method, path)) and len(found) >= count and found,
        )


@pytest.fixture(scope="module")
def reading(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A store served read-only, shared by the servers of the abuse tests."""
    db = stores.copy(tmp_path_factory.mktemp("reader"))
    with Service(db, embedder=HashingEmbedder(), readers=2) as service:
        yield service


@pytest.fixture(scope="module")
def answer(reading: Service) -> dict[str, Any]:
    with served(reading) as (url, _), httpx.Client(base_url=url, timeout=DEADLINE_S) as client:
        response = client.post("/v1/search", json=QUERY)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    assert found["hits"]
    return found


@pytest.fixture
def reader(reading: Service, answer: dict[str, Any]) -> Iterator[Reader]:
    """A server of its own over the shared store; after the test it must still answer as
    before, and once it has shut down (every request ended) nothing may be logged amiss."""
    with served(reading) as (url, watch):
        found = Reader(url, watch, answer)
        yield found
        found.assert_serving()
    watch.assert_clean()


@server_layer_only
def test_the_watch_sees_an_unexpected_error(
    reading: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the abuse tests look for is seen: an error raised in a search is answered 500,
    logged as unexpected and counted."""

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a search that breaks")

    monkeypatch.setattr(Memory, "search", broken)
    with served(reading) as (url, watch), httpx.Client(base_url=url, timeout=DEADLINE_S) as client:
        response = client.post("/v1/search", json=QUERY)
    assert response.status_code == 500
    assert_error_body(response.headers["content-type"], response.content)
    assert watch.errors == ["stratamem.server.http: unexpected error in a request"]
    assert watch.lines("POST", "/v1/search") == [500]
    with pytest.raises(AssertionError):
        watch.assert_clean()


ROUNDS = 25


@server_layer_only
def test_clients_that_vanish_mid_request_leave_the_server_serving(reader: Reader) -> None:
    body = json.dumps(QUERY).encode()
    partial = body[: len(body) // 2]
    for _ in range(ROUNDS):
        # The request whole, then gone before the answer.
        send_and_drop(reader.url, http_request("/v1/search", body))
        # Half the announced body, then gone.
        send_and_drop(reader.url, http_request("/v1/search", partial, length=len(body)))
        # A chunked body cut inside its first chunk.
        send_and_drop(
            reader.url,
            chunked_request("/v1/search", f"{len(body):x}\r\n".encode() + partial),
        )
    with httpx.Client(base_url=reader.url, timeout=httpx.Timeout(DEADLINE_S, read=1e-4)) as hasty:
        for _ in range(ROUNDS):
            with suppress(httpx.ReadTimeout):
                hasty.post("/v1/search", json=QUERY)
    statuses = reader.settle("POST", "/v1/search", 4 * ROUNDS)
    # A request gone before its body was read is answered 400 to nobody; one whose body was
    # read runs its search and answers 200 to nobody.
    assert set(statuses) <= {200, 400}, statuses
    reader.assert_serving()
    for _ in range(ROUNDS):
        send_and_drop(reader.url, http_request("/v1/search", body), reset=True)
        send_and_drop(reader.url, http_request("/v1/search", partial, length=99), reset=True)


QUERY_BODY = json.dumps(QUERY).encode()


@server_layer_only
@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(http_request("/v1/search", QUERY_BODY[:9], length=99), id="short-body"),
        pytest.param(chunked_request("/v1/search", b"40\r\n" + QUERY_BODY[:9]), id="cut-chunk"),
        pytest.param(
            chunked_request("/v1/search", b"%x\r\n%s\r\n" % (len(QUERY_BODY), QUERY_BODY)),
            id="no-last-chunk",
        ),
    ],
)
def test_a_body_cut_short_by_a_client_that_stops_sending_is_dropped(
    reader: Reader, raw: bytes
) -> None:
    assert exchange(reader.url, raw, half_close=True) == b""
    assert reader.settle("POST", "/v1/search", 1) == [400]


def chunks_of(data: bytes, size: int = 7) -> bytes:
    parts = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"


@server_layer_only
@pytest.mark.parametrize(
    ("raw", "status"),
    [
        pytest.param(chunked_request("/v1/search", chunks_of(QUERY_BODY)), 200, id="chunked"),
        pytest.param(
            chunked_request("/v1/search", chunks_of(QUERY_BODY[:-5])), 422, id="chunked-cut-json"
        ),
        pytest.param(
            chunked_request("/v1/search", b"zz\r\n" + QUERY_BODY), 400, id="chunk-size-not-hex"
        ),
        pytest.param(
            chunked_request("/v1/search", b"4\r\n" + QUERY_BODY), 400, id="chunk-longer-than-said"
        ),
        pytest.param(
            http_request("/v1/search", QUERY_BODY, length=len(QUERY_BODY) - 4),
            422,
            id="body-longer-than-said",
        ),
        pytest.param(
            chunked_request("/v1/search", chunks_of(QUERY_BODY)).replace(
                b"Transfer-Encoding", b"Content-Length: 5\r\nTransfer-Encoding"
            ),
            200,
            id="chunked-wins-over-length",
        ),
        pytest.param(
            http_request("/v1/search", QUERY_BODY).replace(
                f"Content-Length: {len(QUERY_BODY)}".encode(), b"Content-Length: 1e3"
            ),
            400,
            id="length-not-a-number",
        ),
        pytest.param(
            http_request("/v1/search", QUERY_BODY, length=2 * MAX_BODY_BYTES),
            413,
            id="length-over-the-limit",
        ),
        pytest.param(
            http_request("/v1/search", QUERY_BODY, length=2**70), 400, id="length-beyond-reason"
        ),
    ],
)
def test_a_body_whose_framing_lies_is_refused(reader: Reader, raw: bytes, status: int) -> None:
    answer = exchange(reader.url, raw)
    got, headers, body = parse_response(answer)
    assert got == status, answer
    if status == 200:
        assert json.loads(body) == reader.answer
    elif headers.get("content-type", "").startswith("application/json"):
        assert_error_body(headers["content-type"], body)
    else:
        # Refused by the HTTP layer before the app saw a request: plain text, then closed.
        assert b"Traceback" not in body


DEEP = 100_000


@server_layer_only
@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param(b'{"query": "caf\xe9 \xff\xfe"}', 400, id="invalid-utf8"),
        pytest.param(b'{"query": "\xed\xa0\x80"}', 422, id="utf8-encoded-surrogate"),
        pytest.param(b'{"query": "\\ud800"}', 422, id="lone-surrogate-escape"),
        pytest.param(b'{"query": "x", "sources": ["\\udcff"]}', 422, id="surrogate-in-list"),
        pytest.param(b'{"query": "x\\u0000y", "limit": 0}', 422, id="nul-in-string"),
        pytest.param(b"[" * DEEP + b"]" * DEEP, 400, id="deeply-nested-array"),
        pytest.param(b'{"a":' * DEEP + b"1" + b"}" * DEEP, 400, id="deeply-nested-object"),
        pytest.param(
            b'{"query": "x", "sources": ' + b"[" * 900 + b"]" * 900 + b"}",
            422,
            id="nested-in-a-field",
        ),
        pytest.param(b'{"query": "x", "limit": ' + b"9" * 5000 + b"}", 400, id="huge-integer"),
        pytest.param(b'{"query": "x", "limit": ' + b"9" * 400 + b"}", 422, id="long-integer"),
        pytest.param(b'{"query": "x", "limit": 1e400}', 422, id="float-overflow"),
        pytest.param(b'{"query": "x", "budget": -1e400}', 422, id="negative-overflow"),
        pytest.param(b'{"query": "x", "limit": NaN}', 422, id="nan"),
        pytest.param(b'{"query": "x", "limit": Infinity}', 422, id="infinity"),
        pytest.param(b'{"query": "x", "since": 1e308}', 422, id="time-past-9999"),
        pytest.param(b'{"query": "x", "since": -1e18}', 422, id="time-before-0"),
        pytest.param(b'{"query": "x", "since": "99999999999999999999w"}', 422, id="span-overflow"),
        pytest.param(b'{"query": "x", "limit": 5', 422, id="unterminated"),
        pytest.param(b'{"query": "x"} trailing', 422, id="trailing-garbage"),
        pytest.param(b"", 422, id="empty"),
    ],
)
def test_malformed_json_gets_a_4xx_json_error(reader: Reader, body: bytes, status: int) -> None:
    with httpx.Client(base_url=reader.url, timeout=DEADLINE_S) as client:
        response = client.post(
            "/v1/search", content=body, headers={"Content-Type": "application/json"}
        )
    assert response.status_code == status, response.text
    assert_error_body(response.headers["content-type"], response.content)


@server_layer_only
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/query_global", b'{"since": 1e400, "until": "2024-01-01"}'),
        ("/v1/query_source", b'{"time_window_days": 1e400}'),
        ("/v1/query_source", b'{"time_window_days": -0.0}'),
        ("/v1/cover_window", b'{"since": "2024-01-01", "until": "1e400"}'),
        ("/v1/query_topic", b'{"entity_id": "\\udcff"}'),
        ("/v1/drill_down", b'{"node_id": "x", "max_depth": 1e400}'),
        ("/v1/fetch_leaves", b'{"ids": [' + b'"x",' * 10_000 + b'"x"]}'),
        ("/v1/search_entities", b'{"query": "\xff"}'),
        ("/v1/ingest", b'{"path": "\\udcff"}'),
    ],
)
def test_malformed_json_on_every_route_gets_a_4xx_json_error(
    reader: Reader, path: str, body: bytes
) -> None:
    with httpx.Client(base_url=reader.url, timeout=DEADLINE_S) as client:
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    assert_error_body(response.headers["content-type"], response.content)


# -- a write whose caller goes away ------------------------------------------------------------


def bulk_request(stores: Stores, **options: Any) -> bytes:
    return http_request("/v1/ingest", json.dumps({"path": str(stores.bulk), **options}).encode())


def finished(client: httpx.Client, response: httpx.Response) -> dict[str, Any]:
    """The report of a write: answered at once (200), or its job's result once done (202)."""
    if response.status_code == 202:
        where = response.headers["location"]

        def done() -> dict[str, Any] | None:
            job = client.get(where)
            assert job.status_code == 200, job.text
            found: dict[str, Any] = job.json()
            assert found["state"] != "failed", found
            return found["result"] if found["state"] == "done" else None

        return wait_for(f"job {where}", done)  # type: ignore[no-any-return]
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@contextmanager
def writable(db: str, **options: Any) -> Iterator[tuple[Service, str, Watch]]:
    """``db`` served with writes on (see :func:`served`)."""
    with (
        Service(db, embedder=HashingEmbedder(), allow_writes=True, readers=2) as service,
        served(service, **options) as (url, watch),
    ):
        yield service, url, watch


@pytest.mark.slow
@server_layer_only
def test_an_ingest_whose_caller_goes_away_runs_to_the_end(stores: Stores, tmp_path: Path) -> None:
    db = stores.copy(tmp_path)
    with writable(db) as (_, url, watch):
        with socket.create_connection(address(url), timeout=PATIENCE_S) as sock:
            sock.sendall(bulk_request(stores))
            at_close = wait_for("the first bulk source", lambda: committed_bulk_sources(db))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # Gone while the ingest was part-way: it answers (to nobody) once it is done.
        assert at_close < SOURCES
        assert wait_for("the ingest's line", lambda: watch.lines("POST", "/v1/ingest")) == [200]
        assert snapshot(db, trees=True) == stores.full
        with httpx.Client(base_url=url, timeout=DEADLINE_S) as client:
            # The same ingest again: the first one left nothing to add.
            again = finished(client, client.post("/v1/ingest", json={"path": str(stores.bulk)}))
            assert again["added"] == 0
            assert again["chunks"] == sum(
                len(s["chunks"]) for scope, s in stores.full.items() if scope.startswith(BULK)
            )
            stats = client.get("/v1/stats")
            assert stats.status_code == 200, stats.text
    watch.assert_clean()
    check_integrity(db)
    assert snapshot(db) == stores.full


@server_layer_only
def test_an_ingest_dropped_at_once_is_run_whole_or_not_at_all(
    stores: Stores, tmp_path: Path
) -> None:
    db = stores.copy(tmp_path)
    with writable(db) as (_, url, watch):
        send_and_drop(url, bulk_request(stores))
        # Gone before its body was read, the request is refused (400, to nobody) and
        # nothing is queued; read, it runs to the end and answers 200 to nobody.
        (status,) = wait_for("the ingest's line", lambda: watch.lines("POST", "/v1/ingest"))
        assert status in {200, 400}
        assert snapshot(db) == (stores.full if status == 200 else stores.before)
    watch.assert_clean()
    check_integrity(db)


@server_layer_only
def test_a_write_job_outlives_its_caller_and_is_found_by_its_id(
    stores: Stores, tmp_path: Path
) -> None:
    """Answered 202 (its time limit is short), the job is asked about by a new client."""
    db = stores.copy(tmp_path)
    with writable(db, timeout_s=0.05) as (service, url, watch):
        with httpx.Client(base_url=url, timeout=DEADLINE_S) as client:
            response = client.post("/v1/ingest", json={"path": str(stores.bulk)})
        assert response.status_code == 202, response.text
        job = response.json()["job"]
        assert response.headers["location"] == f"/v1/jobs/{job['id']}"
        found = service.job(job["id"], None)
        assert found is not None
        assert found.action == "ingest"
        with httpx.Client(base_url=url, timeout=DEADLINE_S) as later:
            report = finished(later, response)
        assert report["chunks"] == sum(
            len(s["chunks"]) for scope, s in stores.full.items() if scope.startswith(BULK)
        )
        assert found.state == "done"
    watch.assert_clean()
    check_integrity(db)
    assert snapshot(db) == stores.full


# -- a server killed mid-ingest ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(db: str, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    """``stratamem serve`` on ``db`` (no tokens, writes on) in a process group of its own, its
    output added to ``log``, and a client of it once it answers; SIGKILLed on the way out
    if still running."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "stratamem", "--db", str(db), "serve", "--no-tokens"),
                *("--allow-writes", "--port", str(port), "--readers", "2"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            # A store on a server keeps its index files in the test run's folder for them.
            env={**ENV, "STRATAMEM_INDEX_DIR": os.environ["STRATAMEM_INDEX_DIR"]},
            start_new_session=True,
        )
    try:
        with httpx.Client(base_url=url, timeout=DEADLINE_S) as client:

            def answers() -> bool:
                assert proc.poll() is None, log.read_text()
                try:
                    return client.get("/healthz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for("the server to answer", answers)
            assert f"serving {shown_location(db)} at {url}\n" in log.read_text()
            yield proc, client
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)


def without_trees(found: dict[str, Any]) -> dict[str, Any]:
    return {scope: {k: v for k, v in s.items() if k != "summaries"} for scope, s in found.items()}


@pytest.mark.slow
@pytest.mark.crash
def test_a_server_killed_mid_ingest_leaves_each_source_whole_or_absent(
    stores: Stores, tmp_path: Path
) -> None:
    db = stores.copy(tmp_path)
    log = tmp_path / "serve.log"
    body = {"path": str(stores.bulk), "embed": False}
    with serve(db, log) as (proc, client):
        before = client.post("/v1/search", json={**QUERY, "mode": "keyword"})
        assert before.status_code == 200, before.text
        ids = [h["node_id"] for h in before.json()["hits"]]
        read = client.post("/v1/fetch_leaves", json={"ids": ids})
        assert read.status_code == 200, read.text
        assert [n["node_id"] for n in read.json()["nodes"]] == ids
        with socket.create_connection(address(str(client.base_url)), timeout=PATIENCE_S) as sock:
            sock.sendall(http_request("/v1/ingest", json.dumps(body).encode()))
            at_kill = wait_for("the first bulk source", lambda: committed_bulk_sources(db))
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL
    assert at_kill < SOURCES, "the ingest ended before the kill"

    check_integrity(db)
    after = snapshot(db)
    # What was stored before is untouched, summaries and all; each bulk source is whole or
    # absent (its summaries were to be sealed once every source was in).
    assert {s: v for s, v in after.items() if not s.startswith(BULK)} == stores.before
    whole = without_trees({s: v for s, v in after.items() if s.startswith(BULK)})
    assert whole == {s: without_trees(stores.full)[s] for s in whole}
    assert at_kill <= len(whole) < SOURCES

    with serve(db, log) as (_, client):
        # The corpus grew, so scores may move; what was found before is still there as it was.
        found = client.post("/v1/search", json={**QUERY, "mode": "keyword"})
        assert found.status_code == 200, found.text
        assert found.json()["hits"]
        leaves = client.post("/v1/fetch_leaves", json={"ids": ids})
        assert leaves.status_code == 200, leaves.text
        assert leaves.json() == read.json()
        report = finished(client, client.post("/v1/ingest", json=body))
        assert not report["problems"]
        assert [s["error"] for s in report["sources"]] == [None] * SOURCES
        assert sum(s["added"] for s in report["sources"]) == sum(
            len(stored["chunks"])
            for scope, stored in stores.full.items()
            if scope.startswith(BULK) and scope not in whole
        )
    check_integrity(db)
    assert snapshot(db) == stores.full
    output = log.read_text()
    assert "Traceback" not in output
    assert not [line for line in output.splitlines() if " 500 " in line]
