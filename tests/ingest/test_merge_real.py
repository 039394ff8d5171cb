"""Incremental ingest on real exports (../shared/data): each is split in two the way a later
or date-range export splits it, and part 1 then part 2, part 2 then part 1, and the whole are
ingested into three stores, which must come out the same. Skipped where the data is absent.
"""

from __future__ import annotations

import email.utils
import json
import shutil
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.ingest.pipeline import IngestReport
from suite import BACKENDS, scratch_database

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SLACK = DATA / "chat" / "slack-export-viewer" / "testarchive.zip"
GUILD = DATA / "chat" / "discord-exporter-frontend" / "example_guild"
LKML = DATA / "email" / "lkml-maildir"
IRC = DATA / "chat" / "ubuntu-irc" / "dev"
CHILL = "Example guild - Text Channels - chill talk [1012224565567125544]"

Snapshot = dict[str, tuple[list[tuple[Any, ...]], set[str]]]


@dataclass(frozen=True, slots=True)
class Split:
    """Two partial exports of one real export, the export itself, and words to search."""

    first: Path
    second: Path
    whole: Path
    phrases: tuple[str, ...]


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not present (../shared/data)")


def split_slack(tmp: Path) -> Split:
    """The zip unpacked, its day files cut by date into two exports that each keep the
    workspace's lists (users.json, channels.json)."""
    _need(SLACK)
    with zipfile.ZipFile(SLACK) as archive:
        archive.extractall(tmp / "unpacked")
    unpacked = tmp / "unpacked"
    days = sorted({day.name for day in unpacked.glob("*/*.json")})
    cut = days[len(days) // 2]
    parts = []
    for name, wanted in (("first", lambda day: day < cut), ("second", lambda day: day >= cut)):
        root = tmp / name / "export"
        root.mkdir(parents=True)
        for listing in unpacked.glob("*.json"):
            shutil.copy(listing, root / listing.name)
        for day in unpacked.glob("*/*.json"):
            if wanted(day.name):
                (root / day.parent.name).mkdir(exist_ok=True)
                shutil.copy(day, root / day.parent.name / day.name)
        parts.append(root)
    return Split(
        *parts, whole=SLACK, phrases=("coveralls", "Houston", "Traceback", "executor", "new commit")
    )


def split_discord(tmp: Path) -> Split:
    """Each channel file's messages cut at their middle timestamp into two files with the same
    header, as ``--before``/``--after`` exports are (the channel exported twice is cut too)."""
    _need(GUILD)
    files = sorted(file.relative_to(GUILD) for file in GUILD.rglob("*.json"))
    for relative in files:
        doc = json.loads((GUILD / relative).read_text(encoding="utf-8"))
        stamps = sorted(message["timestamp"] for message in doc["messages"])
        cut = stamps[len(stamps) // 2]
        for name, after, before in (("first", None, cut), ("second", cut, None)):
            part = dict(doc, dateRange={"after": after, "before": before})
            part["messages"] = [
                message
                for message in doc["messages"]
                if (after is None or message["timestamp"] >= after)
                and (before is None or message["timestamp"] < before)
            ]
            part["messageCount"] = len(part["messages"])
            target = tmp / name / GUILD.name / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(part, ensure_ascii=False), encoding="utf-8")
    return Split(
        tmp / "first" / GUILD.name,
        tmp / "second" / GUILD.name,
        whole=GUILD,
        phrases=("DiscordChatExporter", "threads", "winter", "nitro"),
    )


def split_lkml(tmp: Path) -> Split:
    """The messages cut by their Date header into two Maildirs of the same name."""
    _need(LKML)
    dated = []
    for file in sorted((LKML / "cur").iterdir()):
        headers = BytesHeaderParser().parsebytes(file.read_bytes())
        dated.append((email.utils.parsedate_to_datetime(headers["Date"]).timestamp(), file))
    cut = sorted(when for when, _ in dated)[len(dated) // 2]
    parts = []
    for name, wanted in (("first", lambda when: when < cut), ("second", lambda when: when >= cut)):
        root = tmp / name / LKML.name
        for sub in ("cur", "new", "tmp"):
            (root / sub).mkdir(parents=True)
        for when, file in dated:
            if wanted(when):
                shutil.copy(file, root / "cur" / file.name)
        parts.append(root)
    return Split(*parts, whole=LKML, phrases=("ceph", "ctime", "wireless", "mainline", "patch"))


def split_irc(tmp: Path) -> Split:
    """The logs cut by the date in their names into two folders of the same name (each with
    the annotation files of its logs, which the connector reports and passes over)."""
    _need(IRC)
    logs = sorted(IRC.glob("*.raw.txt"))
    cut = logs[len(logs) // 2].name[:10]
    parts = []
    for name, wanted in (("first", lambda day: day < cut), ("second", lambda day: day >= cut)):
        root = tmp / name / IRC.name
        root.mkdir(parents=True)
        for file in IRC.iterdir():
            if file.is_file() and wanted(file.name[:10]):
                shutil.copy(file, root / file.name)
        parts.append(root)
    return Split(*parts, whole=IRC, phrases=("gstreamer", "motd", "vpnc", "grub", "package"))


SPLITS: dict[str, Callable[[Path], Split]] = {
    "slack": split_slack,
    "discord": split_discord,
    "lkml": split_lkml,
    "irc": split_irc,
}
ORDERS = ("first+second", "second+first", "whole")


@dataclass
class Built:
    """The three stores of one split, with the reports of their ingests."""

    name: str
    split: Split
    backend: str
    memories: dict[str, stratamem.Memory] = field(default_factory=dict)
    reports: dict[str, list[IngestReport]] = field(default_factory=dict)


def ingest(memory: stratamem.Memory, path: Path, *, sync: bool = False) -> IngestReport:
    report = memory.ingest(path, parallel=False, trees=False, sync=sync)
    assert report.sources
    assert not report.failed, report.failed
    return report


def empty_store(request: pytest.FixtureRequest, backend: str) -> str:
    """Where a new store goes: in memory on SQLite (the stores are compared, not kept, and
    syncs to disk would double the time), a new database on PostgreSQL."""
    if backend == "sqlite":
        return ":memory:"
    return scratch_database(request)


@pytest.fixture(
    scope="module", params=[(s, b) for s in sorted(SPLITS) for b in BACKENDS], ids="-".join
)
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Built]:
    name, backend = request.param
    split = SPLITS[name](tmp_path_factory.mktemp(name))
    out = Built(name, split, backend)
    paths = {
        "first+second": [split.first, split.second],
        "second+first": [split.second, split.first],
        "whole": [split.whole],
    }
    for order in ORDERS:
        memory = stratamem.open(empty_store(request, backend), embedder=None)
        out.memories[order] = memory
        out.reports[order] = [ingest(memory, path) for path in paths[order]]
    yield out
    for memory in out.memories.values():
        memory.close()


def snapshot(memory: stratamem.Memory) -> Snapshot:
    """Per scope, the chunks as they read (not their ids or refs, which name the file they
    came from) in order, and the record keys."""
    conn, p = memory.store.conn, memory.store.dialect.p
    out = {}
    for source_id, scope in conn.execute("SELECT id, scope FROM sources"):
        chunks = conn.execute(
            "SELECT seq, content, title, author, ts_start, ts_end, thread FROM chunks"
            f" WHERE source_id = {p} ORDER BY seq",
            (source_id,),
        )
        keys = conn.execute(f"SELECT key FROM records WHERE source_id = {p}", (source_id,))
        out[scope] = ([tuple(row) for row in chunks], {key for (key,) in keys})
    return out


def record_keys(memory: stratamem.Memory) -> dict[str, set[str]]:
    return {scope: keys for scope, (_, keys) in snapshot(memory).items()}


def test_the_records_are_the_same_whichever_way_they_came(built: Built) -> None:
    whole = record_keys(built.memories["whole"])
    assert whole
    assert all(whole.values())
    for order in ORDERS[:2]:
        assert record_keys(built.memories[order]) == whole


def test_the_second_part_adds_to_the_first_and_removes_nothing(built: Built) -> None:
    whole = sum(map(len, record_keys(built.memories["whole"]).values()))
    for order in ORDERS[:2]:
        first, second = built.reports[order]
        first_new = sum(s.new for s in first.sources)
        assert sum(s.new for s in second.sources) == whole - first_new
        assert sum(s.records_removed for s in second.sources) == 0


def test_a_later_partial_export_keeps_what_the_whole_brought(
    built: Built, request: pytest.FixtureRequest
) -> None:
    """The bug this guards: a later export replaced a channel, wiping what only the earlier
    one held."""
    with stratamem.open(empty_store(request, built.backend), embedder=None) as memory:
        ingest(memory, built.split.whole)
        later = ingest(memory, built.split.second)
        assert sum(s.new for s in later.sources) == 0
        assert sum(s.records_removed for s in later.sources) == 0
        assert snapshot(memory) == snapshot(built.memories["whole"])


def test_the_chunks_are_the_same_whichever_way_they_came(built: Built) -> None:
    whole = snapshot(built.memories["whole"])
    for order in ORDERS[:2]:
        assert snapshot(built.memories[order]) == whole, order


def test_searches_answer_the_same_whichever_way_they_came(built: Built) -> None:
    for phrase in built.split.phrases:
        answers = {order: _answers(memory, phrase) for order, memory in built.memories.items()}
        assert answers["whole"], phrase
        assert answers["first+second"] == answers["whole"], phrase
        assert answers["second+first"] == answers["whole"], phrase


def _answers(memory: stratamem.Memory, phrase: str) -> list[tuple[float, str]]:
    """Every hit's score and content, best first. Hits of equal score come in chunk id order,
    and a derived chunk's id covers the file it was read from: stores built from different
    copies of an export list them in content order here."""
    response = memory.search(phrase, mode="keyword", limit=500)
    assert not response.truncated
    return sorted(((hit.score, hit.content) for hit in response.hits), key=lambda a: (-a[0], a[1]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_mail_the_lkml_maildir_holds_twice_is_stored_once(
    request: pytest.FixtureRequest, backend: str
) -> None:
    _need(LKML)
    with stratamem.open(empty_store(request, backend), embedder=None) as memory:
        (source,) = ingest(memory, LKML).sources
        assert source.duplicates > 0
        assert source.new + source.duplicates == source.records
        assert source.new == sum(map(len, record_keys(memory).values()))
        (again,) = ingest(memory, LKML).sources
        assert (again.new, again.updated, again.duplicates) == (0, 0, source.duplicates)
        assert (again.added, again.removed, again.chunks) == (0, 0, source.chunks)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_discord_message_deleted_upstream_is_kept_unless_sync(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """The guild's chill talk was exported twice, the second time after a spam message was
    deleted: a later export that lacks it keeps it, a sync removes it."""
    full, without = GUILD / f"{CHILL}.json", GUILD / f"{CHILL} without deleted message.json"
    _need(without)
    with stratamem.open(empty_store(request, backend), embedder=None) as memory:
        (first,) = ingest(memory, full).sources
        assert any("nitro giveaway" in hit.content for hit in _search(memory, "nitro"))

        (kept,) = ingest(memory, without).sources
        assert (kept.new, kept.records_removed) == (0, 0)
        assert kept.records == first.records - 1
        # The two exports also differ in the last message: the full one holds it edited
        # (timestampEdited), the other before the edit. The edited version is kept, whichever
        # export is read last.
        assert kept.updated == 0
        assert kept.chunks == first.chunks
        assert _search(memory, "nitro")
        edited = ":pepeheart: :pepeheart: :pepeheart:"
        assert any(edited in hit.content for hit in _search(memory, "pepeheart"))

        (synced,) = ingest(memory, without, sync=True).sources
        assert synced.records_removed == 1
        assert not _search(memory, "nitro")
        assert any(edited in hit.content for hit in _search(memory, "pepeheart"))

    with stratamem.open(empty_store(request, backend), embedder=None) as memory:
        ingest(memory, without)
        (edit,) = ingest(memory, full).sources
        assert (edit.new, edit.updated) == (1, 1)  # the spam message, and the edit
        assert any(edited in hit.content for hit in _search(memory, "pepeheart"))


def _search(memory: stratamem.Memory, phrase: str) -> list[Any]:
    return list(memory.search(phrase, mode="keyword").hits)
