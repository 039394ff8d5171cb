"""A PostgreSQL store that cannot be used says why in one line, and never half-writes.

Against the session's real server: a server that is not there, a wrong password, pgvector not
enabled for a role that may not enable it, a connection the server drops between statements
and inside a transaction (what a restart or a failover does to a client), a process forked
with a store open, and a schema from a newer stratamem.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stratamem
from stratamem.errors import SchemaError, StoreError
from stratamem.store.postgres.server import PostgresServer
from stratamem.store.postgres.store import PostgresStore
from suite import PATIENCE_S

NOTES = Path(__file__).resolve().parents[1] / "fixtures" / "jsonl"


def _database(url: str) -> str:
    return url.split("?", 1)[0].rsplit("/", 1)[1]


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


def test_a_server_that_is_not_there_is_one_line_naming_it() -> None:
    with pytest.raises(StoreError) as caught:
        stratamem.open("postgresql://nobody:secret@127.0.0.1:1/memory?connect_timeout=3")
    text = _one_line(caught.value)
    assert "cannot connect" in text
    assert "127.0.0.1" in text
    assert "secret" not in text  # the password is never shown


def test_the_cli_reports_an_unreachable_server_and_exits_non_zero() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stratamem", "--db", "postgresql://127.0.0.1:1/x", "stats"],
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )
    assert done.returncode != 0
    assert "cannot connect" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_wrong_password_is_refused_in_one_line(postgres_server: PostgresServer) -> None:
    hba = Path(postgres_server.folder) / "pg_hba.conf"
    rule = "local all stratamem_pw scram-sha-256\n"
    if rule not in hba.read_text():
        hba.write_text(rule + hba.read_text())
    postgres_server.psql(
        "DO $$ BEGIN CREATE ROLE stratamem_pw LOGIN PASSWORD 'right';"
        " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )
    postgres_server.psql("SELECT pg_reload_conf()")
    url = postgres_server.new_database()
    wrong = url.replace("postgres:@", "stratamem_pw:wrong@")
    with pytest.raises(StoreError) as caught:
        stratamem.open(wrong)
    text = _one_line(caught.value)
    assert "password authentication failed" in text
    assert "wrong" not in text.replace("wrong@", "")  # redacted: no password in the message


def test_pgvector_not_enabled_says_how_to_enable_it(postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database()
    name = _database(url)
    postgres_server.psql(
        "DO $$ BEGIN CREATE ROLE stratamem_plain LOGIN;"
        " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )
    postgres_server.psql("GRANT CREATE ON SCHEMA public TO stratamem_plain", name)
    plain = url.replace("postgres:@", "stratamem_plain:@")
    with pytest.raises(StoreError) as caught:
        stratamem.open(plain)
    text = _one_line(caught.value)
    assert "CREATE EXTENSION vector" in text
    # Nothing was created: the database is as it was.
    assert postgres_server.psql(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", name
    ) == [(0,)]
    # Once the owner enables it, the same role opens the store.
    postgres_server.psql("CREATE EXTENSION vector", name)
    with stratamem.open(plain) as memory:
        assert memory.stats()["chunks"] == 0


def _drop_connections(server: PostgresServer, url: str) -> int:
    rows = server.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        f"WHERE datname = '{_database(url)}' AND pid <> pg_backend_pid()"
    )
    return int(rows[0][0])


def test_a_dropped_connection_is_made_again_for_the_next_read(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with stratamem.open(postgres_url) as memory:
        memory.ingest(NOTES)
        before = [h.node_id for h in memory.search("release", mode="keyword").hits]
        assert before
        assert _drop_connections(postgres_server, postgres_url) >= 1
        after = [h.node_id for h in memory.search("release", mode="keyword").hits]
        assert after == before
        assert memory.stats()["chunks"] > 0


def test_a_connection_dropped_inside_a_write_is_an_error_and_writes_nothing(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with PostgresStore(postgres_url) as store:

        def write() -> None:
            with store.transaction():
                store.conn.execute(
                    "INSERT INTO settings (key, value) VALUES ('half.written', 'yes')"
                )
                _drop_connections(postgres_server, postgres_url)
                store.conn.execute("INSERT INTO settings (key, value) VALUES ('second', 'yes')")

        with pytest.raises(StoreError) as caught:
            write()
        assert "nothing of it was committed" in _one_line(caught.value)
        # The store carries on, on a new connection, and holds neither row.
        assert store.get_setting("half.written") is None
        assert store.get_setting("second") is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_reads_on_a_session_of_its_own(postgres_url: str) -> None:
    with stratamem.open(postgres_url) as memory:
        memory.ingest(NOTES)
        store = memory.store
        assert isinstance(store, PostgresStore)
        ours = store.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        before = [h.node_id for h in memory.search("release", mode="keyword").hits]
        assert before
        # The parent holds a snapshot across the fork: on a shared session the child's reads
        # would run inside it, and the statements the driver prepares would collide.
        with store.read_snapshot():
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    theirs = store.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                    found = [
                        [h.node_id for h in memory.search("release", mode="keyword").hits]
                        for _ in range(8)  # past the driver's count for preparing a statement
                    ]
                    code = 0 if theirs != ours and all(f == before for f in found) else 1
                finally:
                    os._exit(code)
            deadline = time.monotonic() + PATIENCE_S
            while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            if done[0] == 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the child's reads never finished")
            assert os.waitstatus_to_exitcode(done[1]) == 0
            assert store.conn.in_transaction  # the parent's snapshot is still its own
            assert store.conn.execute("SELECT pg_backend_pid()").fetchone()[0] == ours
        for _ in range(8):
            assert [h.node_id for h in memory.search("release", mode="keyword").hits] == before


def test_a_schema_from_a_newer_stratamem_is_refused(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    stratamem.open(postgres_url).close()
    postgres_server.psql("UPDATE stratamem_schema SET version = 99", _database(postgres_url))
    with pytest.raises(SchemaError) as caught:
        stratamem.open(postgres_url)
    text = _one_line(caught.value)
    assert "newer" in text
    assert "99" in text
