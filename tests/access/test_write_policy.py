"""What a principal holding the write permission may change (:mod:`stratamem.access.writes`):
the scopes it may give, the sources it may write or forget, and the paths it may read, tried
with ``..`` segments, links out of the ingest roots, links within them, and loops."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratamem.access import writes
from stratamem.errors import AccessDenied, NotFoundError
from stratamem.types import Principal, Source, SourceKind

WRITER = Principal("writer", ("eng", "team"), write=True)
READER = Principal("reader", ("team",))
ANY = Principal("any", ("*",), write=True)
NARROW = Principal("narrow", ("team",), sources=("slack:*",), write=True)


def source(scope: str, access: tuple[str, ...], *, kind: SourceKind = SourceKind.CHAT) -> Source:
    return Source(
        id=f"id-{scope}",
        scope=scope,
        kind=kind,
        platform="slack",
        location="/exports/slack",
        access=access,
    )


# -- require_write -------------------------------------------------------------------------------


def test_require_write_lets_the_owner_and_writers_through() -> None:
    writes.require_write(None)
    writes.require_write(WRITER)
    writes.require_write(ANY)


@pytest.mark.parametrize("principal", [READER, Principal("wide", ("*",))])
def test_require_write_refuses_a_principal_without_it(principal: Principal) -> None:
    with pytest.raises(AccessDenied, match=rf"^principal '{principal.name}' may not write"):
        writes.require_write(principal)


# -- new_source_access ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("principal", "expected"),
    [
        (None, None),
        (WRITER, ("eng", "team")),
        (ANY, None),
        (Principal("mixed", ("*", "ops"), write=True), ("ops",)),
        (NARROW, ("team",)),
    ],
)
def test_a_new_source_gets_the_writers_own_scopes(
    principal: Principal | None, expected: tuple[str, ...] | None
) -> None:
    assert writes.new_source_access(principal) == expected


# -- check_access --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "access", [None, [], ["eng"], ["team", "eng"], ["TEAM"], [" eng ", "eng"], "eng,team"]
)
def test_a_writer_may_give_the_scopes_it_holds(access: list[str] | str | None) -> None:
    writes.check_access(WRITER, access)


@pytest.mark.parametrize(
    ("access", "foreign"),
    [
        (["private"], "private"),
        (["eng", "ops"], "ops"),
        (["ops", "team", "board"], "board, ops"),
        (["ENG", "Ops"], "ops"),
    ],
)
def test_a_writer_may_not_give_scopes_it_does_not_hold(access: list[str], foreign: str) -> None:
    with pytest.raises(AccessDenied) as refused:
        writes.check_access(WRITER, access)
    assert str(refused.value) == (
        f"principal 'writer' may not give scopes it does not hold: {foreign}"
    )


def test_a_writer_may_not_give_any_scope_as_a_label() -> None:
    with pytest.raises(ValueError, match="bad access scope"):
        writes.check_access(WRITER, ["*"])


@pytest.mark.parametrize("access", [["board"], ["ops", "private"], ["*"]])
def test_the_owner_and_a_principal_of_any_scope_may_give_any(access: list[str]) -> None:
    writes.check_access(None, access)
    writes.check_access(ANY, access)


# -- admit_source --------------------------------------------------------------------------------


def test_the_owner_writes_any_source() -> None:
    hidden = source("slack:#board", ("board",))
    assert writes.admit_source(None, hidden, hidden, named=False) is None
    assert writes.admit_source(None, None, source("slack:#x", ()), named=True) is None


def test_a_new_source_unnamed_gets_the_writers_scopes() -> None:
    after = source("notes:research", ("private",), kind=SourceKind.DOCUMENT)
    assert writes.admit_source(WRITER, None, after, named=False) == ("eng", "team")


def test_a_new_source_of_a_principal_of_any_scope_keeps_its_kinds_default() -> None:
    after = source("notes:research", ("private",), kind=SourceKind.DOCUMENT)
    assert writes.admit_source(ANY, None, after, named=False) is None


def test_a_new_source_with_named_scopes_it_reads_is_admitted_as_named() -> None:
    after = source("slack:#new", ("eng",))
    assert writes.admit_source(WRITER, None, after, named=True) is None


@pytest.mark.parametrize("access", [("board",), ()])
def test_a_new_source_it_could_not_read_is_refused(access: tuple[str, ...]) -> None:
    after = source("slack:#new", access)
    with pytest.raises(AccessDenied) as refused:
        writes.admit_source(WRITER, None, after, named=True)
    shown = ", ".join(access) or "(none)"
    assert str(refused.value) == (
        f"principal 'writer' could not read source 'slack:#new' with scopes {shown}: "
        "give scopes it holds"
    )


def test_an_existing_source_it_reads_keeps_its_scopes() -> None:
    before = source("slack:#general", ("team",))
    assert writes.admit_source(WRITER, before, before, named=False) is None
    assert writes.admit_source(READER, before, before, named=False) is None


@pytest.mark.parametrize(
    "before",
    [
        source("slack:#board", ("board",)),
        source("slack:#bare", ()),
        Source(
            id="id-slack:#locked",
            scope="slack:#locked",
            kind=SourceKind.CHAT,
            platform="slack",
            location="/exports/slack",
            access=("team",),
            locked=True,
        ),
    ],
    ids=["other-scopes", "no-scopes", "locked"],
)
@pytest.mark.parametrize("named", [False, True])
def test_an_existing_source_it_cannot_read_is_refused(before: Source, named: bool) -> None:
    # Even written with scopes it holds: it may not take over a source hidden from it.
    after = source(before.scope, ("team",))
    with pytest.raises(AccessDenied) as refused:
        writes.admit_source(WRITER, before, after, named=named)
    assert str(refused.value) == f"principal 'writer' may not write source {before.scope!r}"
    assert "board" not in str(refused.value).replace("slack:#board", "")


@pytest.mark.parametrize("access", [("board",), ()])
def test_an_existing_source_it_would_no_longer_read_is_refused(access: tuple[str, ...]) -> None:
    before = source("slack:#general", ("team",))
    with pytest.raises(AccessDenied, match="could not read source 'slack:#general'"):
        writes.admit_source(WRITER, before, source("slack:#general", access), named=True)


def test_a_principal_of_any_scope_writes_any_source_with_scopes() -> None:
    before = source("slack:#board", ("board",))
    assert writes.admit_source(ANY, before, before, named=False) is None
    with pytest.raises(AccessDenied):
        writes.admit_source(ANY, None, source("slack:#bare", ()), named=True)


def test_a_writer_narrowed_to_some_sources_writes_only_those() -> None:
    inside = source("slack:#new", ("team",))
    assert writes.admit_source(NARROW, None, inside, named=False) == ("team",)
    outside = source("notes:new", ("private",), kind=SourceKind.DOCUMENT)
    with pytest.raises(AccessDenied, match="could not read source 'notes:new'"):
        writes.admit_source(NARROW, None, outside, named=False)


# -- require_readable ----------------------------------------------------------------------------


def test_require_readable_passes_what_the_principal_reads() -> None:
    writes.require_readable(None, source("slack:#board", ("board",)))
    writes.require_readable(WRITER, source("slack:#general", ("team",)))
    writes.require_readable(ANY, source("slack:#board", ("board",)))


@pytest.mark.parametrize(
    "hidden",
    [
        source("slack:#board", ("board", "secret-scope")),
        source("slack:#bare", ()),
        Source(
            id="id-slack:#locked",
            scope="slack:#locked",
            kind=SourceKind.CHAT,
            platform="slack",
            location="/exports/slack",
            access=("team",),
            locked=True,
        ),
    ],
    ids=["other-scopes", "no-scopes", "locked"],
)
def test_a_source_hidden_from_the_principal_is_not_found(hidden: Source) -> None:
    with pytest.raises(NotFoundError) as missing:
        writes.require_readable(WRITER, hidden)
    # Nothing of the source but the name it was asked by.
    assert "secret-scope" not in str(missing.value)
    assert hidden.location not in str(missing.value)
    assert not isinstance(missing.value, AccessDenied)


# -- check_path ----------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """``root`` (an ingest root) and ``second`` (another), beside ``outside`` and a sibling
    ``root-evil`` whose name starts as the root's does; each holds a file."""
    base = tmp_path.resolve()
    found = {}
    for name in ("root", "second", "outside", "root-evil"):
        folder = base / name
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "note.md").write_text(f"# {name}\n")
        (folder / "file.md").write_text(f"# {name}\n")
        found[name] = folder
    return found


def roots(tree: dict[str, Path]) -> tuple[Path, ...]:
    return (tree["root"], tree["second"])


def refused(path: str | Path, tree: dict[str, Path]) -> str:
    with pytest.raises(AccessDenied) as caught:
        writes.check_path(path, roots(tree), owner=False)
    return str(caught.value)


@pytest.mark.parametrize(
    "relative",
    [".", "file.md", "sub", "sub/note.md", "sub/../file.md", "sub/./note.md", "missing.md"],
)
def test_paths_under_a_root_are_resolved(tree: dict[str, Path], relative: str) -> None:
    path = tree["root"] / relative
    assert writes.check_path(path, roots(tree), owner=False) == path.resolve()
    assert writes.check_path(str(path), roots(tree), owner=False) == path.resolve()


def test_every_root_is_one_a_writer_may_read(tree: dict[str, Path]) -> None:
    path = tree["second"] / "sub" / "note.md"
    assert writes.check_path(path, roots(tree), owner=False) == path


@pytest.mark.parametrize(
    "relative",
    [
        "..",
        "../outside",
        "../outside/file.md",
        "sub/../../outside/file.md",
        "sub/../../root-evil/file.md",
        "../outside/no-such-file",
        "../../../../../../../../etc/passwd",
    ],
)
def test_dot_dot_out_of_the_roots_is_refused(tree: dict[str, Path], relative: str) -> None:
    path = f"{tree['root']}/{relative}"
    assert refused(path, tree) == f"{path}: outside the server's ingest roots"


def test_a_relative_path_is_taken_from_the_working_folder(
    tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree["root"])
    assert writes.check_path("sub", roots(tree), owner=False) == tree["root"] / "sub"
    assert "outside the server's ingest roots" in refused("../outside", tree)


def test_a_sibling_whose_name_extends_the_roots_is_outside(tree: dict[str, Path]) -> None:
    assert str(tree["root-evil"]).startswith(str(tree["root"]))
    assert "outside" in refused(tree["root-evil"], tree)
    assert "outside" in refused(tree["root-evil"] / "file.md", tree)


def test_an_existing_and_a_missing_path_outside_are_refused_alike(tree: dict[str, Path]) -> None:
    there = tree["outside"] / "file.md"
    missing = tree["outside"] / "absent.md"
    assert refused(there, tree).replace("file.md", "absent.md") == refused(missing, tree)


def test_a_linked_file_leading_out_is_refused(tree: dict[str, Path]) -> None:
    link = tree["root"] / "linked.md"
    link.symlink_to(tree["outside"] / "file.md")
    assert "outside the server's ingest roots" in refused(link, tree)


def test_a_linked_folder_leading_out_is_refused(tree: dict[str, Path]) -> None:
    link = tree["root"] / "linked"
    link.symlink_to(tree["outside"], target_is_directory=True)
    assert "outside the server's ingest roots" in refused(link, tree)
    assert "outside the server's ingest roots" in refused(link / "file.md", tree)


@pytest.mark.parametrize("target", ["file.md", "sub", "absent", "."])
def test_a_link_inside_a_folder_leading_out_is_refused(tree: dict[str, Path], target: str) -> None:
    deep = tree["root"] / "sub" / "deeper"
    deep.mkdir()
    link = deep / "escape"
    link.symlink_to(tree["outside"] / target)
    message = refused(tree["root"], tree)
    assert message == f"{link}: a link out of the server's ingest roots"
    assert refused(tree["root"] / "sub", tree) == message
    # A folder beside it holds no link and is read.
    assert writes.check_path(tree["root"] / "file.md", roots(tree), owner=False)


def test_a_link_inside_a_folder_to_a_sibling_of_the_root_is_refused(
    tree: dict[str, Path],
) -> None:
    (tree["root"] / "sub" / "evil").symlink_to(tree["root-evil"])
    assert "a link out of the server's ingest roots" in refused(tree["root"], tree)


def test_links_that_stay_inside_the_roots_are_allowed(tree: dict[str, Path]) -> None:
    (tree["root"] / "sub" / "again.md").symlink_to(tree["root"] / "file.md")
    (tree["root"] / "sub" / "up").symlink_to(tree["root"], target_is_directory=True)
    (tree["root"] / "other").symlink_to(tree["second"] / "sub", target_is_directory=True)
    (tree["root"] / "dangling").symlink_to(tree["root"] / "not-yet")
    assert writes.check_path(tree["root"], roots(tree), owner=False) == tree["root"]
    linked = tree["root"] / "other"
    assert writes.check_path(linked, roots(tree), owner=False) == tree["second"] / "sub"


def test_a_link_within_the_roots_to_a_folder_with_a_link_out_is_refused(
    tree: dict[str, Path],
) -> None:
    # root/sub/hop leads to second/sub, inside the roots, which holds a link out: reading
    # through the hop would read the outside.
    (tree["second"] / "sub" / "escape.md").symlink_to(tree["outside"] / "file.md")
    (tree["root"] / "sub" / "hop").symlink_to(tree["second"] / "sub", target_is_directory=True)
    assert "a link out of the server's ingest roots" in refused(tree["root"] / "sub", tree)


@pytest.mark.parametrize("where", ["target", "inside"])
def test_a_link_loop_is_refused(tree: dict[str, Path], where: str) -> None:
    first, second = tree["root"] / "sub" / "a", tree["root"] / "sub" / "b"
    first.symlink_to(second)
    second.symlink_to(first)
    path = first if where == "target" else tree["root"]
    with pytest.raises(AccessDenied):
        writes.check_path(path, roots(tree), owner=False)


def test_a_folder_with_too_many_entries_to_check_is_refused(
    tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes, "MAX_CHECKED_ENTRIES", 3)
    for n in range(3):
        (tree["root"] / "sub" / f"extra-{n}.md").write_text("x")
    assert "ingest a smaller folder" in refused(tree["root"], tree)
    assert writes.check_path(tree["root"] / "sub" / "note.md", roots(tree), owner=False)


@pytest.mark.parametrize("path", ["/", "relative/path", "/etc/passwd"])
def test_without_roots_a_principal_reads_no_path(path: str) -> None:
    with pytest.raises(AccessDenied, match=r"--ingest-root"):
        writes.check_path(path, (), owner=False)


def test_the_owner_reads_anywhere_as_given(
    tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree["root"] / "linked").symlink_to(tree["outside"], target_is_directory=True)
    outside = tree["outside"] / "file.md"
    for path in (outside, tree["root"] / "linked", tree["root"] / ".." / "outside"):
        assert writes.check_path(path, roots(tree), owner=True) == path
        assert writes.check_path(str(path), (), owner=True) == path
    monkeypatch.setenv("HOME", str(tree["outside"]))
    assert writes.check_path("~/file.md", (), owner=True) == outside


def test_a_principal_gets_the_home_folder_expanded_and_checked(
    tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tree["root"]))
    assert writes.check_path("~/file.md", roots(tree), owner=False) == tree["root"] / "file.md"
    monkeypatch.setenv("HOME", str(tree["outside"]))
    assert "outside the server's ingest roots" in refused("~/file.md", tree)


def test_a_root_reached_through_a_link_is_the_root(tree: dict[str, Path]) -> None:
    alias = tree["outside"].parent / "alias"
    alias.symlink_to(tree["root"], target_is_directory=True)
    assert writes.check_path(alias / "file.md", roots(tree), owner=False) == (
        tree["root"] / "file.md"
    )
