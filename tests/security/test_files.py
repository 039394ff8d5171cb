"""Files: what an ingest reads under an ingest root (no link followed, whenever it is swapped
in, and never the store's own files), the modes of the files the store makes, and two checks
of the owner's commands (the name ``owner``, a blank passphrase)."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from serving import live

import stratamem
from stratamem.access.locks import PASSPHRASE_ENV
from stratamem.cli import main
from stratamem.errors import LockError, WrongPassphrase
from stratamem.ops.sources import INGEST
from stratamem.ops.spec import bind
from stratamem.retrieval.legs.keyword import sparse_index
from stratamem.server.http import create_app
from stratamem.server.service import Service, ServiceContext
from stratamem.store.copy import copy_store
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S

# In the store (the owner's note, read from outside the root): what reading the store's
# files would give away.
STORED = "zygomorphic quokka ledger"
# Outside the root, behind the links the tests swap in.
SECRET = "xanthous pangolin payroll"
HARMLESS = "a plain note about the weekly sync"


@dataclass
class Place:
    root: Path
    outside: Path
    db: Path
    token: str


@pytest.fixture
def place(tmp_path: Path) -> Place:
    """An ingest root holding the store (as ``--ingest-root ~`` holds
    ``~/.local/share/stratamem``), with a note of the owner's in it, a saved BM25 file beside
    it, and a principal that may write."""
    root = tmp_path / "home"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"# Payroll\n\nThe {SECRET} numbers.\n")
    (outside / "box").mkdir()
    (outside / "box" / "note.md").write_text(f"# Box\n\nThe {SECRET} numbers.\n")
    owners = tmp_path / "owners"
    owners.mkdir()
    (owners / "ledger.md").write_text(f"# Ledger\n\nThe {STORED} holds every account.\n")
    db = root / ".local" / "share" / "stratamem" / "stratamem.db"
    with stratamem.open(db, embedder=HashingEmbedder()) as mem:
        mem.ingest(owners / "ledger.md", parallel=False)
        sparse_index(mem.store).persist_min_docs = 0
        assert mem.search(STORED, mode="keyword").hits
        sparse_index(mem.store).persist_now()
        token = mem.principals.add("writer", "research", write=True)
    (root / "notes").mkdir()
    (root / "notes" / "plain.md").write_text(f"# Plain\n\n{HARMLESS}.\n")
    return Place(root, outside, db, token)


def stored_text(db: Path) -> str:
    """Every chunk's text in the store, read from the file itself."""
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT content FROM chunks").fetchall()
    return "\n".join(str(row[0]) for row in rows)


def owner_sources(db: Path) -> set[str]:
    with stratamem.open(db, embedder=None) as mem:
        return {source.scope for source in mem.sources.list()}


# -- the store under an ingest root ----------------------------------------------------------


def test_a_principal_cannot_ingest_the_stores_own_files_through_a_live_server(
    place: Place,
) -> None:
    folder = place.db.parent
    before = owner_sources(place.db)
    asked = [
        (place.db, "markdown"),
        (Path(f"{place.db}-wal"), "markdown"),
        (Path(f"{place.db}-shm"), "markdown"),
        (Path(f"{place.db}.bm25.idx"), "markdown"),
        (place.db, "jsonl"),
        (place.db, "mbox"),
        (folder, "mbox"),
        (folder, "markdown"),
    ]
    # A hard link to the database elsewhere under the root is the same file.
    os.link(place.db, place.root / "notes" / "copy.md")
    asked.append((place.root / "notes" / "copy.md", "markdown"))
    with Service(
        place.db, embedder=HashingEmbedder(), allow_writes=True, ingest_roots=[place.root]
    ) as service:
        side = {p.name for p in folder.iterdir()}
        assert {"stratamem.db", "stratamem.db-wal", "stratamem.db.bm25.idx"} <= side
        app = create_app(service, access_log=None)
        with (
            live(app) as url,
            httpx.Client(
                base_url=url,
                headers={"Authorization": f"Bearer {place.token}"},
                timeout=PATIENCE_S,
            ) as client,
        ):
            for path, form in asked:
                response = client.post(
                    "/v1/ingest", json={"path": str(path), "format": form, "scope": "loot"}
                )
                assert response.status_code in (200, 403, 422), response.text
                if response.status_code == 200:
                    assert response.json()["chunks"] == 0, (path, form, response.text)
    text = stored_text(place.db)
    assert "SQLite format" not in text
    assert text.count(STORED) == 1  # the owner's own note, once
    assert owner_sources(place.db) == before


def test_a_refused_ingest_of_the_store_keeps_the_servers_locks(place: Place) -> None:
    # Closing any descriptor of the database drops every POSIX lock the process holds on it:
    # a refusal made after opening the file would leave the server's SQLite unlocked, and the
    # next process to close the store would delete the WAL under it, with its writes.
    with Service(
        place.db, embedder=HashingEmbedder(), allow_writes=True, ingest_roots=[place.root]
    ) as service:
        app = create_app(service, access_log=None)
        with (
            live(app) as url,
            httpx.Client(
                base_url=url,
                headers={"Authorization": f"Bearer {place.token}"},
                timeout=PATIENCE_S,
            ) as client,
        ):
            added = client.post("/v1/add", json={"text": "written before the refusal"})
            assert added.status_code == 200, added.text
            for path in (place.db, Path(f"{place.db}-wal")):
                refused = client.post("/v1/ingest", json={"path": str(path), "format": "markdown"})
                assert refused.status_code in (200, 403, 422), refused.text
                assert refused.status_code != 200 or refused.json()["chunks"] == 0
            # Another process opens the store and closes it.
            other = subprocess.run(
                [sys.executable, "-m", "stratamem", "--db", str(place.db), "stats", "--json"],
                capture_output=True,
                text=True,
                timeout=PATIENCE_S,
            )
            assert other.returncode == 0, other.stderr
            assert Path(f"{place.db}-wal").exists(), "the WAL was removed under the live server"
            added = client.post("/v1/add", json={"text": "written after the refusal zqafter"})
            assert added.status_code == 200, added.text
    assert "zqafter" in stored_text(place.db)


def test_a_store_files_skip_says_why(place: Place) -> None:
    with Service(
        place.db, embedder=HashingEmbedder(), allow_writes=True, ingest_roots=[place.root]
    ) as service:
        report = ingest_as(service, "writer", place.db, format="markdown", scope="loot")
    assert report["chunks"] == 0
    assert any("the store's own files" in problem for problem in report["problems"])


def test_the_owner_never_ingests_the_stores_own_files_either(place: Place) -> None:
    with stratamem.open(place.db, embedder=None) as mem:
        for name in ("stratamem.db", "stratamem.db-wal", "stratamem.db.bm25.idx"):
            report = mem.ingest(place.db.parent / name, format="markdown", parallel=False)
            assert report.chunks == 0
            assert any("the store's own files" in str(p) for p in report.problems)
        # Reached through a link, as the owner's ingest follows links.
        (place.root / "notes" / "link.md").symlink_to(place.db)
        report = mem.ingest(place.root / "notes" / "link.md", format="markdown", parallel=False)
        assert report.chunks == 0
        # A folder holding them reads the rest.
        (place.db.parent / "mine.md").write_text(f"# Mine\n\n{HARMLESS}.\n")
        report = mem.ingest(place.db.parent, format="markdown", parallel=False)
        assert report.chunks == 1
    assert "SQLite format" not in stored_text(place.db)


# -- links swapped in while a principal ingests ----------------------------------------------


def ingest_as(service: Service, who: str, path: Path, **options: Any) -> dict[str, Any]:
    """The ingest operation as the server runs it for ``who``, on this thread."""
    args = bind(INGEST, {"path": str(path), "embed": False, "trees": False, **options})
    result: dict[str, Any] = INGEST.run(ServiceContext(service, who), args)
    return result


class Flipper:
    """``flip(True)``/``flip(False)`` in turn, as fast as they go, in another process, from
    the start of the block (forked before the server starts its threads) until :meth:`stop`
    (a bounded number of times); it stops with the name as it was."""

    def __init__(self, flip: Callable[[bool], None]) -> None:
        forking = multiprocessing.get_context("fork")
        self.done = forking.Event()

        def run() -> None:
            for _ in range(2_000_000):
                if self.done.is_set():
                    break
                flip(True)
                flip(False)

        self.child = forking.Process(target=run, daemon=True)

    def __enter__(self) -> Flipper:
        self.child.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.done.set()
        self.child.join(PATIENCE_S)


TRIES = 300


def _exchange() -> Callable[[Path, Path], None]:
    """Exchange two names at once (Linux's ``renameat2`` with ``RENAME_EXCHANGE``), as one
    who swaps a folder for a link would."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        pytest.skip("no renameat2 here")
    at_cwd, rename_exchange = -100, 2

    def exchange(a: Path, b: Path) -> None:
        if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), rename_exchange) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(a))

    return exchange


def test_a_file_swapped_for_a_link_out_is_never_read(place: Place) -> None:
    notes = place.root / "notes"
    stage = place.root / ".stage"
    stage.mkdir()
    flip_file = notes / "flip.md"
    flip_file.write_text(f"# Flip\n\n{HARMLESS}.\n")
    (stage / "link").symlink_to(place.outside / "secret.md")
    (stage / "file").write_text(f"# Flip\n\n{HARMLESS}.\n")

    def flip(to_link: bool) -> None:
        # Atomic swaps: the name is always there, a file or a link out.
        made = stage / "new"
        os.link(stage / ("link" if to_link else "file"), made, follow_symlinks=False)
        os.replace(made, flip_file)

    with (
        Flipper(flip) as flipper,
        Service(
            place.db, embedder=HashingEmbedder(), allow_writes=True, ingest_roots=[place.root]
        ) as service,
    ):
        for n in range(TRIES):
            target = notes if n % 2 else flip_file
            try:
                ingest_as(service, "writer", target, format="markdown", scope=f"race-{n}")
            except stratamem.AccessDenied:
                continue  # the check saw the link: refused before reading
        flipper.stop()
        assert SECRET not in stored_text(place.db)
        # The same ingest reads the file when it stays one.
        report = ingest_as(service, "writer", flip_file, format="markdown", scope="settled")
    assert report["chunks"] == 1
    text = stored_text(place.db)
    assert SECRET not in text
    assert HARMLESS in text


def test_a_folder_swapped_for_a_link_out_is_never_read(place: Place) -> None:
    box = place.root / "box"
    box.mkdir()
    (box / "note.md").write_text(f"# Box\n\n{HARMLESS}.\n")
    other = place.root / ".other"
    other.symlink_to(place.outside / "box", target_is_directory=True)
    exchange = _exchange()
    try:
        exchange(box, other)
        exchange(box, other)
    except OSError as exc:
        pytest.skip(f"names cannot be exchanged here: {exc}")

    def flip(to_link: bool) -> None:
        # The folder and the link change places at once (each flip exchanges them).
        exchange(box, other)

    with (
        Flipper(flip) as flipper,
        Service(
            place.db, embedder=HashingEmbedder(), allow_writes=True, ingest_roots=[place.root]
        ) as service,
    ):
        for n in range(TRIES):
            target = box if n % 2 else box / "note.md"
            try:
                ingest_as(service, "writer", target, format="markdown", scope=f"race-{n}")
            except (stratamem.AccessDenied, stratamem.StratamemError):
                continue  # refused, or not there at that moment
        flipper.stop()
        assert SECRET not in stored_text(place.db)
        # The same ingest reads the folder when it stays one.
        report = ingest_as(service, "writer", box, format="markdown", scope="settled")
    assert report["chunks"] == 1
    text = stored_text(place.db)
    assert SECRET not in text
    assert HARMLESS in text


def test_a_link_under_the_root_is_skipped_with_a_reason(place: Place) -> None:
    notes = place.root / "notes"
    with Service(
        place.db, embedder=HashingEmbedder(), allow_writes=True, ingest_roots=[place.root]
    ) as service:
        # Inside the root, so the check lets it by; the reader still does not follow it.
        (notes / "again.md").symlink_to(notes / "plain.md")
        report = ingest_as(service, "writer", notes, format="markdown")
    assert report["chunks"] == 1
    assert any(
        "again.md" in problem and "not followed" in problem for problem in report["problems"]
    )


# -- file modes ------------------------------------------------------------------------------


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def modes(folder: Path) -> dict[str, int]:
    """The permission bits of everything under ``folder``, by path relative to it."""
    found = {".": stat.S_IMODE(folder.stat().st_mode)}
    for path in folder.rglob("*"):
        found[path.relative_to(folder).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return found


def private(found: dict[str, int]) -> dict[str, int]:
    """What of ``found`` another user could read or enter (empty when nothing)."""
    return {name: oct(mode) for name, mode in found.items() if mode & 0o077}  # type: ignore[misc]


def test_a_new_store_and_its_folders_are_private(umask: int, tmp_path: Path) -> None:
    db = tmp_path / "data" / "deep" / "stratamem.db"
    with stratamem.open(db, embedder=HashingEmbedder()) as mem:
        mem.items.add("a first item", source="notes")
        sparse_index(mem.store).persist_min_docs = 0
        assert mem.search("first", mode="keyword").hits
        sparse_index(mem.store).persist_now()
        found = modes(tmp_path / "data")
    assert {"deep/stratamem.db", "deep/stratamem.db-wal", "deep/stratamem.db-shm"} <= set(found)
    assert "deep/stratamem.db.bm25.idx" in found
    assert private(found) == {}
    assert found["deep/stratamem.db"] == 0o600
    assert found["deep"] == found["."] == 0o700


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_every_command_that_makes_a_store_makes_it_private(umask: int, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nThe first note.\n")
    made = tmp_path / "made"
    result = cli("--db", str(made / "ingested" / "s.db"), "ingest", str(notes))
    assert result.exit_code == 0, result.output
    result = cli("--db", str(made / "added" / "s.db"), "add", "one item", "--source", "notes")
    assert result.exit_code == 0, result.output
    result = cli("copy", str(made / "added" / "s.db"), str(made / "copied" / "s.db"))
    assert result.exit_code == 0, result.output
    copy_store(str(made / "added" / "s.db"), str(made / "copied-again.db"))
    with Service(made / "served" / "s.db", embedder=None):
        pass
    found = modes(made)
    assert {"ingested/s.db", "added/s.db", "copied/s.db", "served/s.db"} <= set(found)
    assert "copied-again.db" in found
    assert private(found) == {}


def test_an_existing_store_is_made_private_when_opened(tmp_path: Path) -> None:
    db = tmp_path / "old" / "s.db"
    with stratamem.open(db, embedder=None) as mem:
        mem.items.add("an item", source="notes")
    for path in db.parent.iterdir():
        path.chmod(0o644)
    with stratamem.open(db, embedder=None) as mem:
        files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in db.parent.iterdir()}
    assert files["s.db"] == 0o600
    assert all(mode == 0o600 for name, mode in files.items() if name.startswith("s.db")), files


# -- the owner's commands --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["owner", "Owner", "OWNER", "oWnEr", "0wner", "owner.", "own-er"])
def test_a_principal_cannot_be_named_as_the_owner(tmp_path: Path, name: str) -> None:
    with stratamem.open(tmp_path / "s.db", embedder=None) as mem:
        with pytest.raises(ValueError, match="reserved") as refused:
            mem.principals.add(name, "team")
        assert "\n" not in str(refused.value)
        assert name in str(refused.value)
        assert [p.name for p in mem.principals.list()] == []
        assert mem.principals.add("owners-bot", "team")  # a name that only contains it


@pytest.mark.parametrize("name", ["Bob", "BOB", "bOb"])
def test_a_principal_cannot_take_a_name_that_reads_as_anothers(tmp_path: Path, name: str) -> None:
    with stratamem.open(tmp_path / "s.db", embedder=None) as mem:
        mem.principals.add("bob", "team")
        with pytest.raises(ValueError, match="reads as") as refused:
            mem.principals.add(name, "team")
        assert "\n" not in str(refused.value)
        assert [p.name for p in mem.principals.list()] == ["bob"]


def test_the_cli_refuses_a_principal_named_owner(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["--db", str(tmp_path / "s.db"), "principal", "add", "Owner", "--scopes", "team"]
    )
    assert result.exit_code != 0
    assert "reserved" in result.output
    assert "Traceback" not in result.output


@pytest.fixture
def lockable(tmp_path: Path) -> Path:
    db = tmp_path / "s.db"
    with stratamem.open(db, embedder=None) as mem:
        mem.items.add("a private thought", source="journal")
    return db


BLANKS = ["", " ", "   ", "\t", " \n "]


@pytest.mark.parametrize("blank", BLANKS)
def test_a_blank_passphrase_is_refused_by_the_python_api(
    lockable: Path, blank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with stratamem.open(lockable, embedder=None) as mem:
        if blank:  # an empty one is no passphrase given: the next place is looked at
            with pytest.raises(ValueError, match="only whitespace") as refused:
                mem.locks.lock("journal", passphrase=blank)
            assert "\n" not in str(refused.value)
        monkeypatch.setenv(PASSPHRASE_ENV, blank)
        # Set but blank, it is refused and named; empty, it is as if unset: none is found.
        with pytest.raises(ValueError if blank else LockError) as none_found:
            mem.locks.lock("journal")
        assert "\n" not in str(none_found.value)
        assert PASSPHRASE_ENV in str(none_found.value)
        assert not mem.sources.get("journal").locked


def test_a_blank_passphrase_is_refused_for_unlock(
    lockable: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with stratamem.open(lockable, embedder=None) as mem:
        mem.locks.lock("journal", passphrase="a real one")
        with pytest.raises(WrongPassphrase):  # given outright, the lock's check decides
            mem.locks.unlock("journal", passphrase="   ")
        monkeypatch.setenv(PASSPHRASE_ENV, "  ")
        with pytest.raises(ValueError, match=PASSPHRASE_ENV):
            mem.locks.unlock("journal")
        assert mem.sources.get("journal").locked


@pytest.mark.parametrize("how", ["env", "file", "typed"])
def test_a_blank_passphrase_is_refused_by_the_cli(
    lockable: Path, tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--db", str(lockable), "lock", "journal"]
    env = {PASSPHRASE_ENV: "   "}
    if how == "file":
        given = tmp_path / "pass"
        given.write_text("   \n")
        args += ["--passphrase-file", str(given)]
        env = {PASSPHRASE_ENV: ""}
    elif how == "typed":
        monkeypatch.setattr("stratamem.cli.common.interactive", lambda: True)
        env = {PASSPHRASE_ENV: ""}
    result = CliRunner().invoke(main, args, env=env, input="   \n   \n")
    assert result.exit_code != 0
    assert "whitespace" in result.output
    assert "Traceback" not in result.output
    with stratamem.open(lockable, embedder=None) as mem:
        assert not mem.sources.get("journal").locked
