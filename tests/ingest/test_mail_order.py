"""Mail threads do not depend on the order the messages come in: within an mbox file, across
the files of a folder, and in a Maildir or a folder of ``.eml`` files, whose messages are read
in Date order (a reply dated before what it answers comes first). A synthetic list archive
always runs; real list mail (``../shared/data``) runs where present.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from email import message_from_bytes
from email.policy import compat32
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratamem.ingest.connectors.email import _thread_entry
from stratamem.ingest.connectors.eml import EmlConnector
from stratamem.ingest.connectors.maildir import MaildirConnector, _maildir_files
from stratamem.ingest.connectors.mbox import MboxConnector, _mbox_messages, _mbox_thread_entries
from stratamem.ingest.model import Connector, ReadContext, Record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "email" / "threads.mbox"
_SEPARATOR = re.compile(r"(?m)^(?=From \S+ +\w{3} \w{3} +\d+ [\d:]+ \d{4}$)")

A1, B1, C1 = "a1@list.example.org", "b1@list.example.org", "c1@list.example.org"
# Worked out by hand from the fixture's headers. a3 carries only In-Reply-To (as LISTSERV
# archives keep it); the message without a Message-ID answers a3; b1 is not in the archive;
# c1's "<yes>" is no id; d1's own References were dropped, but d2's place it under a4.
EXPECTED = {
    A1: A1,
    "a2@list.example.org": A1,
    "a3@list.example.org": A1,
    "a4@list.example.org": A1,
    "Dave Okafor": A1,
    "b2@list.example.org": B1,
    "b3@list.example.org": B1,
    C1: C1,
    "c2@list.example.org": C1,
    "d1@list.example.org": A1,
    "d2@list.example.org": A1,
}


def split_mbox(text: str) -> list[str]:
    """The messages of an mbox text, each with its ``From `` line, as the file holds them."""
    return [part for part in _SEPARATOR.split(text) if part]


def read(connector: Connector, path: Path, *, scope: str | None = None) -> list[Record]:
    ctx = ReadContext(scope=scope)
    records = [record for stream in connector.read(path, ctx) for record in stream.records]
    assert ctx.problems == []
    return records


def threads(records: list[Record]) -> dict[str, str | None]:
    """Each message's thread, by Message-ID (by author for the one without)."""
    out: dict[str, str | None] = {}
    for record in records:
        named = not (record.id or "").startswith("sha256:")
        key = (record.id if named else record.author) or ""
        assert key not in out
        out[key] = record.thread
    return out


MESSAGES = split_mbox(FIXTURE.read_text())


def test_the_fixture_threads_as_worked_out_by_hand() -> None:
    assert len(MESSAGES) == len(EXPECTED)
    assert threads(read(MboxConnector(), FIXTURE)) == EXPECTED


def test_newest_first_gives_the_same_threads(tmp_path: Path) -> None:
    path = tmp_path / "newest-first.mbox"
    path.write_text("".join(reversed(MESSAGES)))
    records = read(MboxConnector(), path)
    assert threads(records) == EXPECTED
    assert Counter(record.thread for record in records) == {A1: 7, B1: 2, C1: 2}
    # The message without a Message-ID is named by its bytes wherever it stands in the file.
    oldest = {r.id for r in read(MboxConnector(), FIXTURE)}
    assert {r.id for r in records} == oldest


@settings(max_examples=20)
@given(order=st.permutations(range(len(MESSAGES))))
def test_any_order_in_one_file_gives_the_same_threads(
    tmp_path_factory: pytest.TempPathFactory, order: list[int]
) -> None:
    path = tmp_path_factory.mktemp("order") / "list.mbox"
    path.write_text("".join(MESSAGES[n] for n in order))
    assert threads(read(MboxConnector(), path)) == EXPECTED


@settings(max_examples=10)
@given(order=st.permutations(range(len(MESSAGES))), cut=st.integers(1, len(MESSAGES) - 1))
def test_any_order_across_the_files_of_a_folder_gives_the_same_threads(
    tmp_path_factory: pytest.TempPathFactory, order: list[int], cut: int
) -> None:
    folder = tmp_path_factory.mktemp("folder") / "list"
    folder.mkdir()
    shuffled = [MESSAGES[n] for n in order]
    # The first month's file may hold the replies, the second their roots.
    (folder / "2001-01.txt").write_text("".join(shuffled[:cut]))
    (folder / "2001-02.txt").write_text("".join(shuffled[cut:]))
    assert threads(read(MboxConnector(), folder)) == EXPECTED
    assert threads(read(MboxConnector(), folder, scope="list")) == EXPECTED


def _dated_backwards(messages: list[str]) -> list[str]:
    """The messages with their Date headers handed out in reverse: replies dated before
    what they answer, so that a reader in Date order meets them first."""
    dates = [re.search(r"(?m)^Date: (.*)$", message) for message in messages]
    stamps = [parsedate_to_datetime(match.group(1)) for match in dates if match]
    out = []
    for message, stamp in zip(messages, reversed(stamps), strict=True):
        body = message.split("\n", 1)[1]  # a file of its own has no envelope line
        out.append(re.sub(r"(?m)^Date: .*$", "Date: " + format_datetime(stamp), body))
    return out


def test_a_maildir_dated_backwards_gives_the_same_threads(tmp_path: Path) -> None:
    box = tmp_path / "list"
    for sub in ("cur", "new", "tmp"):
        (box / sub).mkdir(parents=True)
    for n, message in enumerate(_dated_backwards(MESSAGES)):
        (box / "cur" / f"{1000 + n}.{n}.host:2,S").write_text(message)
    records = read(MaildirConnector(), box)
    assert records[0].id == "d2@list.example.org"  # the newest reply is read first
    assert threads(records) == EXPECTED


def test_eml_files_dated_backwards_give_the_same_threads(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    for n, message in enumerate(_dated_backwards(MESSAGES)):
        (folder / f"{n:02}.eml").write_text(message)
    assert threads(read(EmlConnector(), folder)) == EXPECTED


# --------------------------------------------------------------------------- the header pass


_LINES = [
    "From a@example.org Thu Mar  1 09:00:00 2001\n",
    "From the start, this is a body line.\n",
    ">From a@example.org Thu Mar  1 09:00:00 2001\n",
    "Message-ID: <m1@example.org>\n",
    "Message-ID: <m2@example.org>\n",
    "Message-ID: <yes>\n",
    "In-Reply-To: <m1@example.org>\n",
    "References: <m0@example.org> <m2@example.org>\n",
    "Subject: x\n",
    "Content-Type: text/plain\n",
    "\n",
    "\r\n",
    "   \n",
    "just some words\n",
    "no newline at the end",
]


@settings(max_examples=150)
@given(lines=st.lists(st.sampled_from(_LINES), max_size=40))
def test_the_header_pass_splits_as_the_reader_splits(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str]
) -> None:
    """The pass that reads header blocks only (for threads) finds the messages the reader
    finds, with the same headers, however the file starts and whatever its bodies hold."""
    path = tmp_path_factory.mktemp("heads") / "box.mbox"
    path.write_text("".join(lines))
    try:
        expected = [
            _thread_entry(message_from_bytes(raw.data, policy=compat32))
            for raw in _mbox_messages(path, ReadContext())
        ]
    except Exception:  # not an mbox file: the header pass finds nothing
        expected = []
    assert list(_mbox_thread_entries(path, ReadContext().max_item_bytes)) == expected


def test_the_header_pass_finds_separators_across_its_blocks(tmp_path: Path) -> None:
    path = tmp_path / "big.mbox"
    body = "x" * 70 + "\n"
    with path.open("w") as handle:
        for n in range(400):  # 400 messages of ~3.5 KB: many separators straddle a block
            handle.write(f"From a@example.org Thu Mar  1 09:00:00 2001\nMessage-ID: <m{n}@x.org>\n")
            handle.write(f"In-Reply-To: <m{n - 1}@x.org>\n\n" + body * 50)
    entries = list(_mbox_thread_entries(path, ReadContext().max_item_bytes))
    assert [own for own, _ in entries] == [f"m{n}@x.org" for n in range(400)]
    records = read(MboxConnector(), path)
    assert {record.thread for record in records} == {"m-1@x.org"}


# --------------------------------------------------------------------------- real list mail


def _real_messages(folder: Path) -> list[bytes]:
    """The messages of a real Maildir, oldest first."""
    files = _maildir_files(folder, ReadContext())
    dated = []
    for file in files:
        data = file.read_bytes()
        stamp = message_from_bytes(data, policy=compat32)["Date"]
        dated.append((parsedate_to_datetime(stamp).timestamp(), file.name, data))
    return [data for _, _, data in sorted(dated)]


def _in_reply_to_only(message: bytes) -> bytes:
    """The message without its References header, as LISTSERV archives keep mail."""
    head, blank, body = message.partition(b"\n\n")
    head = re.sub(rb"(?im)^References:.*\n?(?:[ \t].*\n?)*", b"", head + b"\n").rstrip(b"\n")
    return head + blank + body


def _as_mbox(messages: list[bytes]) -> bytes:
    out = bytearray()
    for message in messages:
        out += b"From list@example.org Thu Mar  1 09:00:00 2001\n"
        out += re.sub(rb"(?m)^(>*From )", rb">\1", message).rstrip(b"\n") + b"\n\n"
    return bytes(out)


@pytest.mark.parametrize(
    ("name", "variant", "count"),
    [
        ("lkml-maildir", "as sent", 19),
        # Without References a reply whose parent is not in the sample starts a thread.
        ("lkml-maildir", "In-Reply-To only", 39),
        ("notmuch-list-maildir", "as sent", 24),
        ("notmuch-list-maildir", "In-Reply-To only", 24),
    ],
)
def test_real_list_mail_threads_the_same_in_any_order(
    shared_data: Path, tmp_path: Path, name: str, variant: str, count: int
) -> None:
    messages = _real_messages(shared_data / "email" / name)
    if variant != "as sent":
        messages = [_in_reply_to_only(message) for message in messages]
    shuffled = list(messages)
    random.Random(2001).shuffle(shuffled)
    found = {}
    for order, listed in (
        ("oldest first", messages),
        ("newest first", messages[::-1]),
        ("shuffled", shuffled),
    ):
        path = tmp_path / f"{order}.mbox"
        path.write_bytes(_as_mbox(listed))
        found[order] = {record.id: record.thread for record in read(MboxConnector(), path)}
    assert found["newest first"] == found["oldest first"]
    assert found["shuffled"] == found["oldest first"]
    assert len(set(found["oldest first"].values())) == count
