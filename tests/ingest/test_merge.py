"""Incremental ingest: chat, mail and record sources merge what each export holds.

One small conversation (tests/fixtures/incremental: ten messages over three days, m1..m10) is
written in each platform's own format; each test builds the exports it needs from it (a split,
an edit, a message gone) in ``tmp_path`` and ingests them in sequence.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import shutil
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import click.testing
import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.ingest.model import ReadContext, SourceStream
from stratamem.ingest.pipeline import IngestReport, SourceResult
from stratamem.types import Record, SourceKind

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "incremental"

STORY = [f"m{n}" for n in range(1, 11)]
DAY1, DAY2, DAY3 = STORY[:4], STORY[4:7], STORY[7:]
# The two parts of an overlapping pair of exports: the first taken on day 3 after m8 was
# written, the second starting on day 2.
FIRST, SECOND = STORY[:8], STORY[4:]
LATER = DAY3  # a partial export of the last day only

# m6 edited upstream: its old word disappears, a new one appears.
EDIT = {"m6": ("iowait graph", "disk flamegraph")}
OLD_WORD, NEW_WORD = "iowait", "flamegraph"
# m3 is deleted upstream (for IRC, whose lines are keyed by their number, day 1's log is gone).
DELETED_WORD = "snapshots"

Edits = Mapping[str, tuple[str, str]]
NO_EDITS: Edits = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Message:
    story: str  # m1..m10
    text: str  # what it says, as the chunks hold it


class Export:
    """One platform's copy of the conversation, written out in parts on demand."""

    name = ""
    deleted: tuple[str, ...] = ("m3",)

    def __init__(self) -> None:
        self.messages = [Message(s, text) for s, text in zip(STORY, self.texts(), strict=True)]

    def texts(self) -> list[str]:
        raise NotImplementedError

    def write(
        self,
        dest: Path,
        keep: Collection[str] = STORY,
        *,
        edits: Edits = NO_EDITS,
        twice: bool = False,
    ) -> Path:
        """An export holding the messages of ``keep`` (with ``edits`` applied; each message
        twice with ``twice``) under ``dest``; returns the path to ingest."""
        raise NotImplementedError


def _edit(text: str, story: str, edits: Edits) -> str:
    if story not in edits:
        return text
    old, new = edits[story]
    assert old in text
    return text.replace(old, new)


class SlackExport(Export):
    name = "slack"
    root = FIXTURES / "slack"

    def days(self) -> dict[str, list[dict[str, Any]]]:
        return {f.name: json.loads(f.read_text()) for f in sorted((self.root / "ops").iterdir())}

    def texts(self) -> list[str]:
        return [m["text"] for day in self.days().values() for m in day if "subtype" not in m]

    def write(
        self,
        dest: Path,
        keep: Collection[str] = STORY,
        *,
        edits: Edits = NO_EDITS,
        twice: bool = False,
    ) -> Path:
        if twice:
            raise ValueError("a Slack export holds each ts once")
        root = dest / "slack-export"
        (root / "ops").mkdir(parents=True)
        for name in ("users.json", "channels.json"):
            shutil.copy(self.root / name, root / name)
        stories = iter(STORY)
        for name, day in self.days().items():
            kept = []
            for message in day:
                if "subtype" in message:  # a join notice: part of the day, not of the story
                    kept.append(message)
                    continue
                story = next(stories)
                if story in keep:
                    if story in edits:
                        edited_at = f"{float(message['ts']) + 3600:.6f}"
                        message = {
                            **message,
                            "text": _edit(message["text"], story, edits),
                            "edited": {"user": message["user"], "ts": edited_at},
                        }
                    kept.append(message)
            if any("subtype" not in m for m in kept):
                (root / "ops" / name).write_text(json.dumps(kept, indent=4))
        return root


class DiscordExport(Export):
    """DiscordChatExporter JSON; a part is what ``--after``/``--before`` write: the same
    header, fewer messages."""

    name = "discord"
    file = next((FIXTURES / "discord").glob("*.json"))

    def texts(self) -> list[str]:
        return [m["content"] for m in json.loads(self.file.read_text())["messages"]]

    def write(
        self,
        dest: Path,
        keep: Collection[str] = STORY,
        *,
        edits: Edits = NO_EDITS,
        twice: bool = False,
    ) -> Path:
        doc = json.loads(self.file.read_text())
        messages = []
        for story, message in zip(STORY, doc["messages"], strict=True):
            if story in keep:
                if story in edits:
                    message = {
                        **message,
                        "content": _edit(message["content"], story, edits),
                        "timestampEdited": "2024-04-04T06:00:00.000+00:00",
                    }
                messages.append(message)
        doc["messages"] = messages * 2 if twice else messages
        doc["messageCount"] = len(doc["messages"])
        dest.mkdir(parents=True)
        path = dest / self.file.name
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False))
        return path


def _mbox_messages() -> list[str]:
    text = (FIXTURES / "mail" / "ops.mbox").read_text()
    parts = ["From " + part for part in text.split("\nFrom ")]
    parts[0] = parts[0].removeprefix("From ")
    return [part if part.endswith("\n") else part + "\n" for part in parts]


def _body(message: str) -> str:
    return message.split("\n\n", 1)[1].split("\n\n-- \n")[0]


class MboxExport(Export):
    name = "mbox"

    def texts(self) -> list[str]:
        return [_body(m) for m in _mbox_messages()]

    def write(
        self,
        dest: Path,
        keep: Collection[str] = STORY,
        *,
        edits: Edits = NO_EDITS,
        twice: bool = False,
    ) -> Path:
        kept = [
            _edit(m, story, edits)
            for story, m in zip(STORY, _mbox_messages(), strict=True)
            if story in keep
        ]
        dest.mkdir(parents=True)
        path = dest / "ops.mbox"  # the scope, mbox:ops, comes from the name
        path.write_text("\n".join(kept * 2 if twice else kept))
        return path


class MaildirExport(Export):
    """A Maildir of the same mails, one file each; ``twice`` delivers each to ``new/`` too."""

    name = "maildir"

    def texts(self) -> list[str]:
        return MboxExport().texts()

    def write(
        self,
        dest: Path,
        keep: Collection[str] = STORY,
        *,
        edits: Edits = NO_EDITS,
        twice: bool = False,
    ) -> Path:
        root = dest / "ops"  # the scope, maildir:ops, comes from the name
        for sub in ("cur", "new", "tmp"):
            (root / sub).mkdir(parents=True)
        for n, (story, message) in enumerate(zip(STORY, _mbox_messages(), strict=True), start=1):
            if story not in keep:
                continue
            mail = _edit(message, story, edits).split("\n", 1)[1]  # without the From_ line
            date = email.utils.parsedate_to_datetime(mail.split("Date: ", 1)[1].split("\n")[0])
            stamp = int(date.timestamp())
            (root / "cur" / f"{stamp}.M{n}P4242.mail.phoenixlabs.dev:2,S").write_text(mail)
            if twice:
                (root / "new" / f"{stamp}.M{n}P5151.mail.phoenixlabs.dev").write_text(mail)
        return root


class IrcExport(Export):
    """A folder of daily logs. A line is keyed by its file and number, so a part drops whole
    logs or the end of one (a log copied before the day was over), never a line inside."""

    name = "irc"
    deleted = tuple(DAY1)
    folder = FIXTURES / "irc" / "ops"

    def lines(self) -> Iterator[tuple[str, list[str], list[int]]]:
        """Each log's name, its lines and the indexes of the spoken ones."""
        for file in sorted(self.folder.iterdir()):
            lines = file.read_text().splitlines()
            yield file.name, lines, [i for i, line in enumerate(lines) if line.startswith("[")]

    def texts(self) -> list[str]:
        return [lines[i].split("> ", 1)[1] for _, lines, spoken in self.lines() for i in spoken]

    def write(
        self,
        dest: Path,
        keep: Collection[str] = STORY,
        *,
        edits: Edits = NO_EDITS,
        twice: bool = False,
    ) -> Path:
        if twice:
            raise ValueError("a log line is keyed by its place")
        root = dest / "ops"  # the scope, irc:ops, comes from the name
        root.mkdir(parents=True)
        stories = iter(STORY)
        for name, lines, spoken in self.lines():
            kept = [next(stories) for _ in spoken]
            flags = [story in keep for story in kept]
            if not any(flags):
                continue
            if flags != sorted(flags, reverse=True):
                raise ValueError(f"{name}: only whole logs or their ends can be left out")
            last = spoken[flags.index(False) - 1] if False in flags else len(lines) - 1
            out = list(lines[: last + 1])
            for i, story in zip(spoken, kept, strict=True):
                if i <= last:
                    out[i] = _edit(out[i], story, edits)
            (root / name).write_text("\n".join(out) + "\n")
        return root


class JsonlExport(Export):
    name = "jsonl"
    file = FIXTURES / "jsonl" / "ops.jsonl"

    def rows(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.file.read_text().splitlines()]

    def texts(self) -> list[str]:
        return [row["text"] for row in self.rows()]

    def write(
        self,
        dest: Path,
        keep: Collection[str] = STORY,
        *,
        edits: Edits = NO_EDITS,
        twice: bool = False,
    ) -> Path:
        rows = [
            {**row, "text": _edit(row["text"], story, edits)}
            for story, row in zip(STORY, self.rows(), strict=True)
            if story in keep
        ]
        dest.mkdir(parents=True)
        path = dest / "ops.jsonl"  # the scope, jsonl:ops, comes from the name
        path.write_text("".join(json.dumps(row) + "\n" for row in rows * (2 if twice else 1)))
        return path


EXPORTS: dict[str, Callable[[], Export]] = {
    e.name: e
    for e in (SlackExport, DiscordExport, MboxExport, MaildirExport, IrcExport, JsonlExport)
}


@pytest.fixture(params=sorted(EXPORTS))
def export(request: pytest.FixtureRequest) -> Export:
    return EXPORTS[request.param]()


@pytest.fixture
def open_memory(
    store_location: str, locations: Any, tmp_path: Path
) -> Iterator[Callable[[], stratamem.Memory]]:
    """Opens empty stores on the backend under test, closing them all at the end. SQLite's in
    memory: a merge does not depend on where the file lies, and the syncs of a store on disk
    double the time of this file (the CLI test uses one on disk)."""
    opened: list[stratamem.Memory] = []

    def open_() -> stratamem.Memory:
        where = ":memory:"
        if locations.is_postgres(store_location):
            where = locations.new(store_location, tmp_path, "") if opened else store_location
        memory = stratamem.open(where, embedder=None)
        opened.append(memory)
        return memory

    yield open_
    for memory in opened:
        memory.close()


# -- helpers ---------------------------------------------------------------------------------


def ingest(memory: stratamem.Memory, path: Path, *, sync: bool = False) -> SourceResult:
    """Ingest one export (one source) in-process, trees left queued."""
    report = memory.ingest(path, parallel=False, trees=False, sync=sync)
    return only_source(report)


def only_source(report: IngestReport) -> SourceResult:
    assert not report.failed, report.failed
    assert len(report.sources) == 1, report.sources
    result = report.sources[0]
    assert result.merged is (result.kind != "document")
    return result


def found(memory: stratamem.Memory, word: str) -> list[str]:
    return [hit.content for hit in memory.search(word, mode="keyword", limit=50).hits]


def contents(memory: stratamem.Memory) -> list[str]:
    rows = memory.store.conn.execute("SELECT content FROM chunks ORDER BY source_id, seq")
    return [content for (content,) in rows]


def record_keys(memory: stratamem.Memory) -> set[str]:
    return {key for (key,) in memory.store.conn.execute("SELECT key FROM records")}


def chunk_count(memory: stratamem.Memory) -> int:
    return int(memory.store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])


def snapshot(memory: stratamem.Memory) -> dict[str, tuple[list[tuple[Any, ...]], set[str]]]:
    """Per scope, the chunks as they read (not their ids or refs, which name the file they
    came from) in order, and the record keys."""
    conn = memory.store.conn
    out = {}
    for source_id, scope in conn.execute("SELECT id, scope FROM sources"):
        chunks = conn.execute(
            "SELECT seq, content, title, author, ts_start, ts_end, thread FROM chunks"
            f" WHERE source_id = {memory.store.dialect.p} ORDER BY seq",
            (source_id,),
        )
        keys = conn.execute(
            f"SELECT key FROM records WHERE source_id = {memory.store.dialect.p}", (source_id,)
        )
        out[scope] = ([tuple(row) for row in chunks], {key for (key,) in keys})
    return out


def holds_every_message(memory: stratamem.Memory, export: Export, stories: Collection[str]) -> bool:
    held = contents(memory)
    return all(
        any(m.text in chunk for chunk in held) for m in export.messages if m.story in stories
    )


# -- 1. merging exports, per connector --------------------------------------------------------


def test_overlapping_exports_merge_into_their_union(
    export: Export, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    memory = open_memory()
    first = ingest(memory, export.write(tmp_path / "first", FIRST))
    second = ingest(memory, export.write(tmp_path / "second", SECOND))

    assert first.new == len(FIRST)
    assert second.new == len(set(SECOND) - set(FIRST))
    assert second.duplicates == second.records_removed == 0
    assert len(record_keys(memory)) == len(STORY)  # the overlap is stored once
    assert holds_every_message(memory, export, STORY)  # no chunk of the first export lost

    whole = open_memory()
    ingest(whole, export.write(tmp_path / "whole", STORY))
    assert snapshot(memory) == snapshot(whole)


def test_a_partial_later_export_keeps_what_the_store_held(
    export: Export, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    memory = open_memory()
    full = ingest(memory, export.write(tmp_path / "full", STORY))
    before = snapshot(memory)

    later = ingest(memory, export.write(tmp_path / "later", LATER))

    assert later.records == len(LATER)
    assert later.new == later.records_removed == 0
    assert later.chunks == full.chunks  # the bug this guards: a later export wiped the rest
    assert snapshot(memory) == before
    assert holds_every_message(memory, export, STORY)


def test_an_edited_message_is_updated(
    export: Export, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    memory = open_memory()
    ingest(memory, export.write(tmp_path / "before", STORY))
    assert found(memory, OLD_WORD)
    assert not found(memory, NEW_WORD)

    result = ingest(memory, export.write(tmp_path / "after", STORY, edits=EDIT))

    assert (result.new, result.records_removed) == (0, 0)
    assert result.updated >= 1  # exactly 1: test_record_changes_are_counted
    assert not found(memory, OLD_WORD)
    assert any(NEW_WORD in hit for hit in found(memory, NEW_WORD))
    assert len(record_keys(memory)) == len(STORY)
    edited = open_memory()
    ingest(edited, export.write(tmp_path / "edited", STORY, edits=EDIT))
    assert snapshot(memory) == snapshot(edited)


def test_a_message_deleted_upstream_is_kept_unless_sync(
    export: Export, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    memory = open_memory()
    ingest(memory, export.write(tmp_path / "full", STORY))
    before = snapshot(memory)
    rest = [story for story in STORY if story not in export.deleted]
    without = export.write(tmp_path / "without", rest)

    kept = ingest(memory, without)
    assert kept.records_removed == 0
    assert snapshot(memory) == before
    assert found(memory, DELETED_WORD)

    synced = ingest(memory, without, sync=True)
    assert synced.records_removed == len(export.deleted)
    assert not found(memory, DELETED_WORD)
    assert len(record_keys(memory)) == len(rest)
    assert holds_every_message(memory, export, rest)
    fresh = open_memory()
    ingest(fresh, without)
    assert snapshot(memory) == snapshot(fresh)


@pytest.mark.parametrize("name", ["mbox", "maildir", "jsonl"])
def test_a_message_twice_in_one_export_is_stored_once(
    name: str, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    export = EXPORTS[name]()
    once = open_memory()
    single = ingest(once, export.write(tmp_path / "once", STORY))
    memory = open_memory()

    doubled = ingest(memory, export.write(tmp_path / "twice", STORY, twice=True))

    assert doubled.records == 2 * len(STORY)
    assert (doubled.new, doubled.duplicates) == (len(STORY), len(STORY))
    assert doubled.chunks == single.chunks
    assert snapshot(memory) == snapshot(once)


def test_a_mail_read_again_at_another_place_is_unchanged(
    tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    """Where a mail lies is not what it says: delivered to ``new/`` and later moved to
    ``cur/`` with the Seen flag by the mail client, it is the same record."""
    read = MaildirExport().write(tmp_path / "read", STORY)  # cur/<name>:2,S
    unread = Path(shutil.copytree(read, tmp_path / "unread" / read.name))
    for mail in (unread / "cur").iterdir():
        mail.rename(unread / "new" / mail.name.removesuffix(":2,S"))
    memory = open_memory()
    ingest(memory, unread)

    again = ingest(memory, read)

    assert (again.new, again.updated, again.added, again.removed) == (0, 0, 0, 0)


@pytest.mark.parametrize("name", sorted(EXPORTS))
@pytest.mark.parametrize("case", ["overlap", "later", "edit", "delete"])
def test_record_changes_are_counted(
    name: str, case: str, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    """new, updated and removed count messages: a message read again unchanged is neither."""
    export = EXPORTS[name]()
    rest = [story for story in STORY if story not in export.deleted]
    first, then, edits, sync, expected = {
        "overlap": (FIRST, SECOND, {}, False, (len(set(SECOND) - set(FIRST)), 0, 0)),
        "later": (STORY, LATER, {}, False, (0, 0, 0)),
        "edit": (STORY, STORY, EDIT, False, (0, 1, 0)),
        "delete": (STORY, rest, {}, True, (0, 0, len(export.deleted))),
    }[case]
    memory = open_memory()
    ingest(memory, export.write(tmp_path / "first", first))
    result = ingest(memory, export.write(tmp_path / "then", then, edits=edits), sync=sync)
    assert (result.new, result.updated, result.records_removed) == expected
    assert result.duplicates == 0


# -- 2. idempotence ---------------------------------------------------------------------------


@pytest.mark.parametrize("sync", [False, True])
def test_the_same_export_twice_changes_nothing(
    export: Export, sync: bool, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    memory = open_memory()
    path = export.write(tmp_path / "export", STORY)
    first = ingest(memory, path, sync=sync)
    before = snapshot(memory)

    again = ingest(memory, path, sync=sync)

    assert (again.added, again.removed) == (0, 0)
    assert (again.new, again.updated, again.duplicates, again.records_removed) == (0, 0, 0, 0)
    assert again.chunks == first.chunks
    assert snapshot(memory) == before


# The reader in a child process (the default where fork exists) is checked on one chat and
# one mail format.
@pytest.mark.parametrize(
    ("name", "parallel"),
    [(name, False) for name in sorted(EXPORTS)] + [("slack", True), ("mbox", True)],
)
@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_any_split_in_any_order_gives_the_store_of_one_ingest(
    name: str,
    parallel: bool,
    order: tuple[int, ...],
    tmp_path: Path,
    open_memory: Callable[[], stratamem.Memory],
) -> None:
    export = EXPORTS[name]()
    days = [DAY1, DAY2, DAY3]
    memory = open_memory()
    for n in order:
        path = export.write(tmp_path / f"day{n}", days[n])
        only_source(memory.ingest(path, parallel=parallel, trees=False))
    whole = open_memory()
    path = export.write(tmp_path / "whole", STORY)
    only_source(whole.ingest(path, parallel=parallel, trees=False))
    assert snapshot(memory) == snapshot(whole)


def test_a_discord_reply_exported_after_its_parent_merges_as_one_export_of_both(
    tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    export = DiscordExport()
    memory = open_memory()
    ingest(memory, export.write(tmp_path / "before", STORY[:5]))  # up to m5, the thread's root
    ingest(memory, export.write(tmp_path / "after", STORY[5:]))  # m6 and m7 reply to m5
    whole = open_memory()
    ingest(whole, export.write(tmp_path / "whole", STORY))
    assert snapshot(memory) == snapshot(whole)


def test_records_without_ids_are_keyed_by_their_content(
    tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    rows = [{k: v for k, v in row.items() if k != "id"} for row in JsonlExport().rows()]

    def write(name: str, part: list[dict[str, Any]]) -> Path:
        (tmp_path / name).mkdir()
        path = tmp_path / name / "ops.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in part))
        return path

    memory = open_memory()
    assert ingest(memory, write("first", rows[:8])).new == 8
    second = ingest(memory, write("second", rows[4:]))
    assert (second.new, second.updated) == (2, 0)
    assert all(key.startswith("sha256:") for key in record_keys(memory))
    assert len(record_keys(memory)) == len(rows)

    # Without an id an edit is another record: the old text stays until a sync.
    edited = [dict(row) for row in rows]
    edited[5]["text"] = _edit(edited[5]["text"], "m6", EDIT)
    path = write("edited", edited)
    assert ingest(memory, path).new == 1
    assert found(memory, OLD_WORD)
    synced = ingest(memory, path, sync=True)
    assert synced.records_removed == 1
    assert not found(memory, OLD_WORD)
    assert found(memory, NEW_WORD)


# -- 3. documents are replaced ----------------------------------------------------------------


def test_markdown_notes_are_replaced_on_change(
    tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    vault = Path(shutil.copytree(FIXTURES / "notes" / "runbooks", tmp_path / "runbooks"))
    memory = open_memory()
    first = only_source(memory.ingest(vault, parallel=False, trees=False))
    assert first.kind == "document"
    assert not first.merged
    assert found(memory, "kestrel")
    assert found(memory, "acknowledgement")

    backups = vault / "backups.md"
    backups.write_text(backups.read_text().replace("kestrel", "osprey"))
    edited = only_source(memory.ingest(vault, parallel=False, trees=False, sync=False))
    assert edited.added >= 1
    assert not found(memory, "kestrel")
    assert found(memory, "osprey")

    (vault / "on-call.md").unlink()
    gone = only_source(memory.ingest(vault, parallel=False, trees=False))
    assert gone.removed >= 1
    assert not found(memory, "acknowledgement")
    assert found(memory, "osprey")
    synced = only_source(memory.ingest(vault, parallel=False, trees=False, sync=True))
    assert (synced.added, synced.removed) == (0, 0)  # --sync changes nothing for documents
    fresh = open_memory()
    only_source(fresh.ingest(vault, parallel=False, trees=False))
    assert snapshot(memory) == snapshot(fresh)


# -- 4. the command line ----------------------------------------------------------------------


@pytest.fixture
def run(store_location: str) -> Callable[..., click.testing.Result]:
    def invoke(*args: str) -> click.testing.Result:
        return CliRunner().invoke(main, ["--db", store_location, *args], catch_exceptions=False)

    return invoke


def test_cli_reports_record_changes_and_syncs(
    run: Callable[..., click.testing.Result], tmp_path: Path
) -> None:
    export = JsonlExport()
    doubled = export.write(tmp_path / "doubled", STORY, twice=True)
    result = run("ingest", "--quiet", str(doubled))
    assert result.exit_code == 0, result.output
    assert f"records: {len(STORY)} new, 0 updated, {len(STORY)} duplicates folded" in result.output

    result = run("ingest", "--quiet", str(export.write(tmp_path / "edited", STORY, edits=EDIT)))
    assert result.exit_code == 0, result.output
    assert "records: 0 new, 1 updated\n" in result.output

    rest = [story for story in STORY if story != "m3"]
    without = str(export.write(tmp_path / "without", rest, edits=EDIT))
    kept = json.loads(run("ingest", "--json", without).output)
    assert kept["sources"][0]["record_changes"] == {
        "new": 0,
        "updated": 0,
        "duplicates": 0,
        "removed": 0,
    }
    synced = json.loads(run("ingest", "--sync", "--json", without).output)
    (source,) = synced["sources"]
    assert source["merged"] is True
    assert source["record_changes"] == {"new": 0, "updated": 0, "duplicates": 0, "removed": 1}
    assert synced["duplicates"] == 0

    last = export.write(tmp_path / "last", DAY3, edits=EDIT)
    result = run("ingest", "--quiet", "--sync", str(last))
    assert result.exit_code == 0, result.output
    gone = len(STORY) - 1 - len(DAY3)
    assert f"records: 0 new, 0 updated, {gone} removed (--sync)" in result.output
    listed = json.loads(run("sources", "--json").output)
    assert [s["scope"] for s in listed] == ["jsonl:ops"]


# -- 5. a store from before records -----------------------------------------------------------


def _forget_records(memory: stratamem.Memory, *, legacy_ids: bool) -> None:
    """Make the store look as one written before sources kept records: no records, chunks
    not derived from any (and, with ``legacy_ids``, identified as chunks were then: by
    source, place and content)."""
    conn = memory.store.conn
    with memory.store.transaction():
        conn.execute("DELETE FROM records")
        conn.execute("UPDATE chunks SET record_key = NULL")
        if legacy_ids:
            rows = conn.execute("SELECT id, source_id, seq, content_sha256 FROM chunks").fetchall()
            for node, source_id, seq, sha in rows:
                old = hashlib.sha256(f"{source_id}\x00{seq}\x00{sha}".encode()).hexdigest()[:32]
                p = memory.store.dialect.p
                conn.execute(f"UPDATE chunks SET id = {p} WHERE id = {p}", (old, node))
                conn.execute(
                    f"UPDATE entity_index SET node_id = {p} WHERE node_id = {p}", (old, node)
                )


@pytest.mark.parametrize("legacy_ids", [False, True])
@pytest.mark.parametrize("name", ["slack", "mbox", "jsonl"])
def test_a_store_from_before_records_is_merged_without_duplicates(
    name: str, legacy_ids: bool, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    export = EXPORTS[name]()
    path = export.write(tmp_path / "export", STORY)
    memory = open_memory()
    ingest(memory, path)
    _forget_records(memory, legacy_ids=legacy_ids)

    again = ingest(memory, path)

    assert again.new == len(STORY)
    held = contents(memory)
    assert len(held) == len(set(held))  # retire_replaced_chunks: no content twice
    fresh = open_memory()
    assert again.chunks == chunk_count(memory) == ingest(fresh, path).chunks
    assert snapshot(memory) == snapshot(fresh)


@pytest.mark.parametrize("legacy_ids", [False, True])
def test_a_store_from_before_records_merges_edits_after_its_first_merge(
    legacy_ids: bool, tmp_path: Path, open_memory: Callable[[], stratamem.Memory]
) -> None:
    export = SlackExport()
    path = export.write(tmp_path / "export", STORY)
    memory = open_memory()
    ingest(memory, path)
    _forget_records(memory, legacy_ids=legacy_ids)
    ingest(memory, path)

    edited = ingest(memory, export.write(tmp_path / "edited", STORY, edits=EDIT))

    assert edited.updated == 1
    assert not found(memory, OLD_WORD)
    assert found(memory, NEW_WORD)


class _Versions:
    """An in-code connector: one chat source holding the given records."""

    name = "versions"

    def __init__(self, *records: Record) -> None:
        self.records = records

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        yield SourceStream("chat:versions", SourceKind.CHAT, "test", str(path), self.records)


def _version(text: str, edited_at: str | None) -> Record:
    meta = {} if edited_at is None else {"edited_at": edited_at}
    when = datetime(2024, 3, 11, 9, 0, tzinfo=UTC)
    return Record(text=text, ref="v.json#1", time=when, author="ann", id="m1", meta=meta)


@pytest.mark.parametrize(
    ("first", "then", "kept", "updated"),
    [
        # an export taken before the edit, read after it: the edit stays
        (("edited", "2024-03-11T10:00:00+00:00"), ("original", None), "edited", 0),
        # an earlier edit read after a later one: the later stays
        (("later", "2024-03-11T11:00:00+00:00"), ("earlier", "2024-03-11T10:00:00"), "later", 0),
        # the edit read after the original: it replaces it
        (("original", None), ("edited", "2024-03-11T10:00:00+00:00"), "edited", 1),
        # neither says when: what is read last holds
        (("one", None), ("two", None), "two", 1),
    ],
)
def test_of_two_versions_of_a_message_the_later_edit_is_kept(
    first: tuple[str, str | None],
    then: tuple[str, str | None],
    kept: str,
    updated: int,
    tmp_path: Path,
    open_memory: Callable[[], stratamem.Memory],
) -> None:
    memory = open_memory()
    memory.ingest(tmp_path, connector=_Versions(_version(*first)), trees=False)
    (result,) = memory.ingest(tmp_path, connector=_Versions(_version(*then)), trees=False).sources
    assert result.updated == updated
    assert memory.items.get("m1").text == kept
