"""The one opener of ingest: under ingest roots through no link, never the store's files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stratamem.ingest import confine
from stratamem.ingest.model import irregular, open_regular


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path.resolve() / "root"
    outside = tmp_path.resolve() / "outside"
    for folder in (root / "sub", outside / "sub"):
        folder.mkdir(parents=True)
        (folder / "note.md").write_text(f"# {folder.parent.name}\n")
    (root / "sub" / "out.md").symlink_to(outside / "sub" / "note.md")
    (root / "sub" / "in.md").symlink_to(root / "sub" / "note.md")
    (root / "hop").symlink_to(outside / "sub", target_is_directory=True)
    return {"root": root, "outside": outside}


def read(path: Path) -> bytes:
    with open_regular(path) as handle:
        return handle.read()


def test_outside_a_confined_ingest_links_are_followed(tree: dict[str, Path]) -> None:
    assert read(tree["root"] / "sub" / "out.md") == b"# outside\n"
    assert read(tree["root"] / "hop" / "note.md") == b"# outside\n"
    names = {entry.name: entry.is_dir for entry in confine.entries(tree["root"])}
    assert names == {"sub": True, "hop": True}


@pytest.mark.parametrize("relative", ["sub/out.md", "sub/in.md", "hop/note.md"])
def test_confined_no_link_is_followed(tree: dict[str, Path], relative: str) -> None:
    with confine.confined([tree["root"]]), pytest.raises(OSError, match="not followed") as refused:
        read(tree["root"] / relative)
    assert refused.value.strerror == confine.LINK_REASON
    with confine.confined([tree["root"]]):
        assert irregular(tree["root"] / relative) == confine.LINK_REASON
        assert read(tree["root"] / "sub" / "note.md") == b"# root\n"


@pytest.mark.parametrize("path", ["../outside/sub/note.md", "sub/../../outside/sub/note.md"])
def test_confined_nothing_outside_the_roots_is_opened(tree: dict[str, Path], path: str) -> None:
    with confine.confined([tree["root"]]), pytest.raises(PermissionError, match="outside"):
        read(Path(f"{tree['root']}/{path}"))


def test_with_no_roots_nothing_is_opened(tree: dict[str, Path]) -> None:
    with confine.confined([]), pytest.raises(PermissionError):
        read(tree["root"] / "sub" / "note.md")


def test_a_confined_walk_never_goes_through_a_link(tree: dict[str, Path]) -> None:
    with confine.confined([tree["root"]]):
        walked = {
            Path(top).relative_to(tree["root"]).as_posix(): (sorted(folders), sorted(files))
            for top, folders, files in confine.walk(tree["root"])
        }
        listed = {
            entry.name: (entry.is_dir, entry.is_file) for entry in confine.entries(tree["root"])
        }
        assert confine.is_confined()
    # A link is listed with the files, so that reading it says why it is skipped.
    assert walked == {".": (["sub"], ["hop"]), "sub": ([], ["in.md", "note.md", "out.md"])}
    assert listed == {"sub": (True, False), "hop": (False, False)}
    assert not confine.is_confined()


def test_a_confined_walk_of_a_link_reports_it(tree: dict[str, Path]) -> None:
    errors: list[OSError] = []
    with confine.confined([tree["root"]]):
        assert list(confine.walk(tree["root"] / "hop", onerror=errors.append)) == []
        with pytest.raises(OSError, match="not followed"):
            confine.entries(tree["root"] / "hop")
    assert [e.strerror for e in errors] == [confine.LINK_REASON]
    assert errors[0].filename == str(tree["root"] / "hop")


def test_the_stores_files_are_never_opened(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    for name in ("store.db", "store.db-wal", "store.db.bm25.idx", "store.dbx", "other.md"):
        (tmp_path / name).write_text(name)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.link(db, elsewhere / "copy.md")
    files = confine.store_files(db)
    assert files is not None
    with confine.keeping_out(files):
        for name in ("store.db", "store.db-wal", "store.db.bm25.idx"):
            with pytest.raises(PermissionError, match="store's own files"):
                read(tmp_path / name)
        # A file made beside it later is one by its name; a hard link by its inode.
        (tmp_path / "store.db-shm").write_text("late")
        with pytest.raises(PermissionError):
            read(tmp_path / "store.db-shm")
        with pytest.raises(PermissionError):
            read(elsewhere / "copy.md")
        with confine.confined([tmp_path]), pytest.raises(PermissionError):
            read(elsewhere / "copy.md")
        assert read(tmp_path / "store.dbx") == b"store.dbx"
        assert read(tmp_path / "other.md") == b"other.md"
    assert read(db) == b"store.db"
