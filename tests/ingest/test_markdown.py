from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratamem.ingest import registry
from stratamem.ingest.connectors import markdown
from stratamem.ingest.model import ReadContext, Record, SourceStream
from stratamem.types import SourceKind

EXAMPLE_NOTES = Path(__file__).resolve().parents[2] / "examples" / "workspace" / "notes"


@pytest.fixture
def vault(fixtures_dir: Path) -> Path:
    return fixtures_dir / "markdown" / "vault"


@pytest.fixture
def til_like(fixtures_dir: Path) -> Path:
    return fixtures_dir / "markdown" / "til-like"


def stream_of(path: Path, ctx: ReadContext | None = None) -> SourceStream:
    streams = list(markdown.MarkdownConnector().read(path, ctx or ReadContext()))
    assert len(streams) == 1
    return streams[0]


def records_of(path: Path, ctx: ReadContext | None = None) -> dict[str, Record]:
    return {r.doc or "": r for r in stream_of(path, ctx).records}


def note(tmp_path: Path, text: str, name: str = "note.md") -> Record:
    """The one record of a single note written with ``text``."""
    file = tmp_path / name
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8")
    records = list(stream_of(file).records)
    assert len(records) == 1
    return records[0]


def test_registers_itself() -> None:
    spec = registry.spec("markdown")
    assert spec.detect is markdown.detect
    assert isinstance(spec.factory(), markdown.MarkdownConnector)


def test_detect(vault: Path, til_like: Path, fixtures_dir: Path, tmp_path: Path) -> None:
    assert markdown.detect(vault) == 75  # an Obsidian vault
    assert markdown.detect(til_like) == 60
    assert markdown.detect(vault / "Projects" / "Phoenix.md") == 80
    assert markdown.detect(vault / "inbox.txt") == 20  # plain text: others may know better
    assert markdown.detect(vault / "attachments" / "architecture.png") == 0
    assert markdown.detect(fixtures_dir / "jsonl") == 0
    assert markdown.detect(tmp_path) == 0  # empty folder
    assert markdown.detect(tmp_path / "missing") == 0


def test_one_document_stream_for_the_folder(vault: Path) -> None:
    stream = stream_of(vault)
    assert stream.kind is SourceKind.DOCUMENT
    assert stream.platform == "obsidian"
    assert stream.scope == "notes:vault"
    assert stream.title == "vault"
    assert stream.location == str(vault)
    assert isinstance(stream.records, Iterator)


def test_plain_folder_is_markdown_platform_and_scope_override(til_like: Path) -> None:
    stream = stream_of(til_like, ReadContext(scope="team/til"))
    assert stream.platform == "markdown"
    assert stream.scope == "team/til"


def test_notes_in_sorted_path_order_and_non_notes_skipped(vault: Path) -> None:
    ctx = ReadContext()
    refs = [r.ref for r in stream_of(vault, ctx).records]
    # Not here: .obsidian/ (editor state), attachments/architecture.png (not text),
    # daily/empty.md and daily/blank.md (nothing to say; skipped without a report).
    assert refs == [
        "vault/People/Alice Chen.md",
        "vault/Projects/Job Queue.md",
        "vault/Projects/Phoenix.md",
        "vault/daily/2024-03-12.md",
        "vault/daily/2024-03-13.md",
        "vault/inbox.txt",
    ]
    assert [p.path for p in ctx.problems] == [str(vault / "daily" / "2024-03-13.md")]


def test_front_matter_note(vault: Path) -> None:
    record = records_of(vault)["Projects/Phoenix.md"]
    file_text = (vault / "Projects" / "Phoenix.md").read_text(encoding="utf-8")
    assert record.title == "Project Phoenix"  # front matter beats the first heading
    assert record.author == "Alice Chen"
    assert record.id == record.doc == "Projects/Phoenix.md"
    assert record.time == datetime(2024, 3, 1, tzinfo=UTC)
    # The text is everything after the front matter, verbatim, starting at line 13.
    assert record.meta["body_line"] == 13
    assert record.text == file_text.split("\n", 12)[12]
    assert record.text.startswith("# Phoenix overview\n")
    assert record.meta["aliases"] == ["Phoenix", "PHX"]
    assert record.meta["updated"] == "2024-03-20T17:45:00Z"
    assert record.meta["front_matter"] == {
        "title": "Project Phoenix",
        "aliases": ["Phoenix", "PHX"],
        "tags": ["project", "Backend"],
        "date": "2024-03-01",
        "updated": "2024-03-20T17:45:00+00:00",
        "author": "Alice Chen",
        "status": "active",
        "reviewers": ["Bob Martins", "Carol Diaz"],
    }


def test_tags_from_front_matter_and_text_but_not_code_urls_colours_or_numbers(
    vault: Path,
) -> None:
    record = records_of(vault)["Projects/Phoenix.md"]
    assert record.tags == ("project", "backend", "ops/oncall", "planning", "nested/tag")


def test_links_wikilinks_embeds_and_relative_markdown_links(vault: Path) -> None:
    record = records_of(vault)["Projects/Phoenix.md"]
    assert record.links == (
        "Alice Chen",  # [[Alice Chen|Alice]]
        "Release 2.0",  # [[Release 2.0#Timeline]]
        "Projects/Job Queue.md",  # [..](Job%20Queue.md "design"), resolved from Projects/
        "archive/redis notes.md",  # [..](<../archive/redis notes.md>)
        "architecture.png",  # ![[architecture.png]]
        "Bob Martins",
    )


def test_created_with_offset_string_tags_and_modified(vault: Path) -> None:
    record = records_of(vault)["Projects/Job Queue.md"]
    assert record.time == datetime(2024, 3, 12, 8, 30, tzinfo=UTC)  # 09:30+01:00
    assert record.tags == ("queue", "sqlite", "decision")
    assert record.meta["updated"] == "2024-03-14T00:00:00Z"
    assert record.meta["body_line"] == 6
    assert record.title == "SQLite job queue"
    assert record.links == ("Phoenix",)


def test_title_falls_back_to_heading_then_stem(vault: Path) -> None:
    records = records_of(vault)
    assert records["People/Alice Chen.md"].title == "Alice Chen"
    assert records["daily/2024-03-12.md"].title == "2024-03-12"
    assert records["inbox.txt"].title == "inbox"
    assert records["inbox.txt"].tags == ("release",)


def test_links_resolve_relative_to_the_note(vault: Path) -> None:
    record = records_of(vault)["daily/2024-03-12.md"]
    assert record.links == ("Projects/Job Queue.md", "Projects/Phoenix")
    assert record.tags == ("daily",)
    assert record.time == datetime(2024, 3, 12, tzinfo=UTC)


def test_invalid_front_matter_is_reported_and_kept_as_text(vault: Path) -> None:
    ctx = ReadContext()
    record = records_of(vault, ctx)["daily/2024-03-13.md"]
    file = vault / "daily" / "2024-03-13.md"
    assert record.text == file.read_text(encoding="utf-8")
    assert record.meta["body_line"] == 1
    assert record.meta["front_matter"] == {}
    [problem] = ctx.problems
    assert problem.path == str(file)
    assert problem.where == "line 4"
    assert problem.reason.startswith("invalid front matter: ")
    assert problem.reason.endswith("kept as text")


def test_front_matter_that_is_not_a_mapping_is_kept(tmp_path: Path) -> None:
    ctx = ReadContext()
    file = tmp_path / "rule.md"
    file.write_text("---\njust a line between rules\n---\nbody\n", encoding="utf-8")
    [record] = stream_of(file, ctx).records
    assert record.text == file.read_text(encoding="utf-8")
    assert [(p.where, p.reason) for p in ctx.problems] == [
        ("line 2", "invalid front matter: not a mapping; kept as text")
    ]


def test_unclosed_front_matter_is_just_text(tmp_path: Path) -> None:
    ctx = ReadContext()
    record = note(tmp_path, "---\n\nA note that starts with a rule.\n")
    assert record.meta["body_line"] == 1
    assert record.text.startswith("---\n")
    assert ctx.problems == []


def test_empty_front_matter(tmp_path: Path) -> None:
    record = note(tmp_path, "---\n---\n# Title\n")
    assert record.meta["body_line"] == 3
    assert record.text == "# Title\n"
    assert record.meta["front_matter"] == {}


def test_dates_file_then_front_matter_then_mtime(til_like: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(til_like, tmp_path / "til-like"))
    mtime = datetime(2023, 7, 1, 12, 30, tzinfo=UTC).timestamp()
    os.utime(folder / "git" / "undated.md", (mtime, mtime))
    records = records_of(folder)
    assert records["README.md"].time == datetime(2015, 2, 6, tzinfo=UTC)
    assert records["python/join-strings.md"].time == datetime(2021, 6, 1, tzinfo=UTC)
    assert records["python/dated.md"].time == datetime(2020, 1, 2, tzinfo=UTC)  # front matter wins
    # Its line in the dates file has no valid date, so the file's time is used.
    assert records["git/undated.md"].time == datetime(2023, 7, 1, 12, 30, tzinfo=UTC)
    assert records["git/undated.md"].meta["updated"] == "2023-07-01T12:30:00Z"
    assert "_file_added_dates.tsv" not in {r.doc for r in records.values()}
    assert records["README.md"].links == ("python/join-strings.md",)


def test_single_file(vault: Path) -> None:
    stream = stream_of(vault / "People" / "Alice Chen.md")
    assert stream.scope == "notes:Alice Chen"
    [record] = stream.records
    assert record.ref == record.doc == "Alice Chen.md"
    assert record.title == "Alice Chen"


def test_hidden_git_and_node_modules_folders_are_skipped(tmp_path: Path) -> None:
    for rel in (".git/notes.md", "node_modules/pkg/README.md", ".trash/old.md", "a/.draft.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# hidden\n", encoding="utf-8")
    (tmp_path / "a" / "kept.md").write_text("# kept\n", encoding="utf-8")
    stream = stream_of(tmp_path)
    assert stream.platform == "markdown"
    assert [r.doc for r in stream.records] == ["a/kept.md"]


def test_undecodable_bytes_are_replaced_and_reported(tmp_path: Path) -> None:
    file = tmp_path / "cp1252.md"
    file.write_bytes(b"# Caf\xc3\xa9\n\nna\xefve bytes on line 3\n")
    ctx = ReadContext()
    [record] = stream_of(file, ctx).records
    assert record.title == "Café"
    assert "na\ufffdve" in record.text
    assert [(p.path, p.where) for p in ctx.problems] == [(str(file), "line 3")]
    assert "replaced" in ctx.problems[0].reason


def test_crlf_bom_and_body_line(tmp_path: Path) -> None:
    file = tmp_path / "windows.md"
    file.write_bytes(b"\xef\xbb\xbf---\r\ntitle: Win\r\n---\r\nline one\r\nline two\r\n")
    [record] = stream_of(file).records
    assert record.title == "Win"
    assert record.text == "line one\nline two\n"
    assert record.meta["body_line"] == 4


@pytest.mark.parametrize(
    ("text", "tags"),
    [
        ("#alpha #Beta #alpha", ("alpha", "beta")),
        ("# Heading\n## Sub\n#inline", ("inline",)),
        ("see https://x.org/a#frag and page#anchor", ()),
        ("[jump](#section) (#paren)", ()),
        ("colours #fff #FFFFFF #e66465 #fa0f", ()),
        ("issue #123 and #2024", ()),
        (
            "#face and #deadbeef are words; #c0ffee, #fff8 and #0000ff80 are colours",
            ("face", "deadbeef"),
        ),
        ("nested #a/b-c_d/ and #ünïcode", ("a/b-c_d", "ünïcode")),
        ("`#code` and ``#more `code` `` then #real", ("real",)),
        ("```\n#fenced\n```\n~~~~\n#tilde\n~~~~\n#after", ("after",)),
        ("text\n\n    #indented code\n\n- item\n    #continuation", ("continuation",)),
        ("#!/bin/sh and ##double", ()),
    ],
)
def test_inline_tags(tmp_path: Path, text: str, tags: tuple[str, ...]) -> None:
    assert note(tmp_path, text + "\n").tags == tags


def test_front_matter_tag_forms(tmp_path: Path) -> None:
    assert note(tmp_path, "---\ntags: '#a, b c'\n---\nx #B\n").tags == ("a", "b", "c")
    assert note(tmp_path, "---\ntags: [X, '#y', 3]\n---\nx\n").tags == ("x", "y", "3")
    assert note(tmp_path, "---\ntag: solo\n---\nx\n").tags == ("solo",)


@pytest.mark.parametrize(
    ("text", "links"),
    [
        ("[[A|alias]] [[B#Heading]] [[C#^block|x]] ![[img.png]]", ("A", "B", "C", "img.png")),
        ("[[#Local heading]] [[A]] [[A|again]]", ("A",)),
        ("| [[Table\\|alias]] |", ("Table",)),
        (
            "[x](y.md) [z](./sub/z.md#part) [w](../up.markdown)",
            ("y.md", "sub/z.md", "../up.markdown"),
        ),
        ("[x](https://e.org/a.md) [m](mailto:a@b.md) [i](pic.png)", ()),
        ("[x](/from/root.md?plain=1)", ("from/root.md",)),
        ("`[[code]]` and `[x](code.md)`", ()),
    ],
)
def test_links(tmp_path: Path, text: str, links: tuple[str, ...]) -> None:
    assert note(tmp_path, text + "\n").links == links


def test_link_written_from_the_top_resolves_when_relative_fails(tmp_path: Path) -> None:
    (tmp_path / "unix").mkdir()
    (tmp_path / "unix" / "fc.md").write_text("# fc\n", encoding="utf-8")
    (tmp_path / "bash").mkdir()
    (tmp_path / "bash" / "edit.md").write_text("Like [fc](unix/fc.md).\n", encoding="utf-8")
    assert records_of(tmp_path)["bash/edit.md"].links == ("unix/fc.md",)


def test_title_heading_keeps_inline_code_and_ignores_code_blocks(tmp_path: Path) -> None:
    text = "```sh\n# not the title\n```\n\n# Use `git stash` ##\n"
    assert note(tmp_path, text).title == "Use `git stash`"


def test_author_list_and_date_string(tmp_path: Path) -> None:
    record = note(tmp_path, "---\nauthor: [Ann, Bo]\ncreated: '2024-05-01 10:00'\n---\nx\n")
    assert record.author == "Ann, Bo"
    assert record.time == datetime(2024, 5, 1, 10, tzinfo=UTC)


def test_records_are_read_lazily(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("first\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("second\n", encoding="utf-8")
    records = iter(stream_of(tmp_path).records)
    assert next(records).text == "first\n"
    (tmp_path / "b.md").write_text("changed before it was read\n", encoding="utf-8")
    assert next(records).text == "changed before it was read\n"


@given(st.text(alphabet=st.sampled_from("ab #`~[]-*\t\n 1"), max_size=200))
def test_masking_keeps_every_offset_and_newline(text: str) -> None:
    masked = markdown._mask_code(text)
    assert len(masked) == len(text)
    assert [i for i, c in enumerate(masked) if c == "\n"] == [
        i for i, c in enumerate(text) if c == "\n"
    ]


@given(
    st.lists(st.sampled_from(["---", "title: x", "a: [", "", "text", "..."]), max_size=8),
)
def test_body_is_a_suffix_starting_at_body_line(lines: list[str]) -> None:
    text = "\n".join(lines)
    front = markdown._front_matter(text, Path("n.md"), ReadContext())
    assert text.endswith(front.body)
    if front.body:
        assert front.body_line == text[: len(text) - len(front.body)].count("\n") + 1


def test_demo_workspace_notes_read_cleanly() -> None:
    ctx = ReadContext()
    records = records_of(EXAMPLE_NOTES, ctx)
    assert ctx.problems == []
    assert markdown.detect(EXAMPLE_NOTES) == 60
    assert 6 <= len(records) <= 10
    titles = {r.title for r in records.values()}
    assert {"Architecture", "Incident 2024-03-18: queue stalled after deploy"} <= titles
    # Every demo note is dated by its front matter, so the demo reads the same on any checkout.
    assert all(
        r.time is not None and r.time < datetime(2024, 4, 1, tzinfo=UTC) for r in records.values()
    )
    linked = {link for r in records.values() for link in r.links}
    assert {"Architecture", "Alice Chen", "Bob Martins", "Carol Diaz"} <= linked
    assert len(records["Architecture.md"].text) > 4000  # long enough to split into several chunks


@pytest.mark.slow
def test_real_til_collection(shared_data: Path) -> None:
    folder = shared_data / "notes" / "til"
    ctx = ReadContext()
    records = records_of(folder, ctx)
    # The data README counts 1,873 notes: that is every .md file, i.e. the 1,871 TILs (as the
    # collection's README says) plus README.md and CONTRIBUTING.md, which are read as documents
    # too. LICENSE, Taskfile.yml, dprint.json, .vimrc and the dates file are not notes.
    assert len(records) == 1873
    assert ctx.problems == []
    assert markdown.detect(folder) == 60
    readme = records["README.md"]
    assert readme.title == "TIL"
    assert readme.ref == "til/README.md"
    assert readme.time == datetime(2015, 2, 6, tzinfo=UTC)
    assert len(readme.links) > 1800  # the index links every TIL
    join = records["python/join-a-list-of-strings.md"]
    assert join.title == "Join A List Of Strings"
    assert join.time == datetime(2026, 8, 18, tzinfo=UTC)  # from _file_added_dates.tsv
    assert join.meta["body_line"] == 1
    # Renamed after the dates file was written: no line there, so the file's time.
    renamed = records["aws/sign-up-user-with-email-and-password.md"]
    mtime = (folder / "aws" / "sign-up-user-with-email-and-password.md").stat().st_mtime
    assert renamed.time == datetime.fromtimestamp(mtime, tz=UTC)
    # The links between TILs resolve to paths of other TILs.
    assert records["bash/edit-the-current-command-prompt.md"].links == (
        "unix/fix-previous-command-with-fc.md",
    )
    # Hex colours and Elixir's #PID<...> live in code blocks: no stray tags.
    assert {tag for r in records.values() for tag in r.tags} == {"find_or_create_by"}


# The patterns the linear readers replaced; they say what a code span and a heading are.
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)[^\n]+?(?<!`)\1(?!`)")
HEADING = re.compile(r" {0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


@given(st.text(alphabet="`a \t", max_size=40))
def test_inline_code_mask_blanks_what_the_code_span_pattern_finds(line: str) -> None:
    expected = CODE_SPAN.sub(lambda m: " " * len(m[0]), line)
    assert markdown._mask_inline_code(line) == expected


@given(st.text(alphabet="# \tab", max_size=20), st.sampled_from(["", " ", "   "]))
def test_heading_text_is_what_the_heading_pattern_finds(rest: str, indent: str) -> None:
    line = f"{indent}# {rest}"
    match = HEADING.match(line)
    assert markdown._heading_text(line) == (match[1].strip() if match else "")
