from __future__ import annotations

import tracemalloc
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratamem.entities.extract import record_mentions
from stratamem.errors import SourceFormatError
from stratamem.ingest import registry
from stratamem.ingest.connectors.eml import EmlConnector, detect_eml
from stratamem.ingest.connectors.mailbody import html_to_text, split_body
from stratamem.ingest.connectors.maildir import MaildirConnector, detect_maildir
from stratamem.ingest.connectors.mbox import MboxConnector, detect_mbox
from stratamem.ingest.model import Connector, Problem, ReadContext, Record, SourceStream
from stratamem.types import SourceKind

EXAMPLE_MBOX = Path(__file__).resolve().parents[2] / "examples" / "workspace" / "mail" / "team.mbox"

# Message ids of the sample mbox: thread A (build server) and thread B (café menu).
DANA_1 = "20240304141500.GA1234@build.example.org"
FOX_2 = "CAF3b1xq9Yh2kz8wR7mHq+Lx0Pp@mail.gmail.com"
RENEE_3 = "5E1A2B3C-4D5E-4F60-8172-93A4B5C6D7E8@example.org"
DANA_4 = "20240305141000.GB1234@build.example.org"
JUERGEN_5 = "8c1f0e2a-77b4-4d3e-9a51-3f0c2d9e7b10@example.org"
PRIYA_6 = "DM6PR11MB4107A1B2C3D4E5F6A7B8C9D0E1F2@DM6PR11MB4107.namprd11.prod.outlook.com"


def read(
    connector: Connector, path: Path, ctx: ReadContext | None = None
) -> tuple[SourceStream, list[Record]]:
    streams = list(connector.read(path, ctx or ReadContext()))
    assert len(streams) == 1
    return streams[0], list(streams[0].records)


@pytest.fixture
def email_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "email"


@pytest.fixture
def sample(email_dir: Path) -> dict[str, Record]:
    _, records = read(MboxConnector(), email_dir / "sample.mbox")
    return {record.id or "": record for record in records}


# --------------------------------------------------------------------------- registration


def test_registers_three_connectors() -> None:
    for name, cls in (
        ("mbox", MboxConnector),
        ("maildir", MaildirConnector),
        ("eml", EmlConnector),
    ):
        spec = registry.spec(name)
        connector = spec.factory()
        assert isinstance(connector, cls)
        assert isinstance(connector, Connector)
        assert connector.name == name
        assert spec.help


# --------------------------------------------------------------------------- mbox


def test_mbox_stream(email_dir: Path) -> None:
    path = email_dir / "sample.mbox"
    stream, records = read(MboxConnector(), path)
    assert stream.scope == "mbox:sample"
    assert stream.kind is SourceKind.EMAIL
    assert stream.platform == "mbox"
    assert stream.location == str(path)
    assert stream.title == "sample.mbox"
    assert [r.id for r in records] == [DANA_1, FOX_2, RENEE_3, DANA_4, JUERGEN_5, PRIYA_6]


def test_scope_override(email_dir: Path) -> None:
    stream, _ = read(MboxConnector(), email_dir / "sample.mbox", ReadContext(scope="infra"))
    assert stream.scope == "infra"


def test_authors_and_recipients(sample: dict[str, Record]) -> None:
    authors = [(r.author, r.author_id) for r in sample.values()]
    assert authors == [
        ("Dana Whitfield", "dana@example.org"),
        ("Fox Mulder", "fox@example.org"),
        ("Renée Dupré", "renee@example.org"),  # RFC 2047 encoded display name
        ("Dana Whitfield", "dana@example.org"),
        ("Jürgen Müller", "juergen@example.org"),  # ISO-8859-1 encoded display name
        ("Priya Natarajan", "priya@example.org"),
    ]
    first = sample[DANA_1]
    # To, then Cc, lowercased ("Renee@Example.org" in the header).
    assert first.recipients == ("infra@example.org", "fox@example.org", "renee@example.org")
    assert first.meta["from"] == "Dana Whitfield <dana@example.org>"
    assert first.meta["to"] == ["infra@example.org"]
    assert first.meta["cc"] == ["fox@example.org", "renee@example.org"]


def test_timestamps_are_exact_utc(sample: dict[str, Record]) -> None:
    assert [r.time for r in sample.values()] == [
        datetime(2024, 3, 4, 14, 15, 0, tzinfo=UTC),  # 09:15 -0500
        datetime(2024, 3, 4, 15, 2, 11, tzinfo=UTC),  # 16:02:11 +0100
        datetime(2024, 3, 4, 23, 30, 45, tzinfo=UTC),  # 08:30:45 +0900 the next day
        datetime(2024, 3, 5, 14, 10, 0, tzinfo=UTC),
        datetime(2024, 3, 6, 10, 0, 0, tzinfo=UTC),
        datetime(2024, 3, 6, 10, 30, 0, tzinfo=UTC),
    ]


def test_subjects_are_decoded(sample: dict[str, Record]) -> None:
    assert sample[DANA_1].title == "Build server migration on Saturday"
    assert sample[JUERGEN_5].title == "Café menu ☕ for Friday"  # =?UTF-8?B?...?=
    assert sample[PRIYA_6].title == "RE: Café menu ☕ for Friday"


def test_threads_and_replies(sample: dict[str, Record]) -> None:
    threads = Counter(r.thread for r in sample.values())
    assert threads == {DANA_1: 4, JUERGEN_5: 2}
    assert sample[FOX_2].reply_to == DANA_1
    assert sample[RENEE_3].reply_to == FOX_2
    assert sample[DANA_4].reply_to == RENEE_3
    assert sample[PRIYA_6].reply_to == JUERGEN_5
    assert sample[DANA_1].reply_to is None
    assert sample[DANA_4].meta["references"] == [DANA_1, FOX_2, RENEE_3]


def test_truncated_references_still_reach_the_root(sample: dict[str, Record]) -> None:
    # Renée's References names only Fox's message; the root comes from the id map.
    assert sample[RENEE_3].meta["references"] == [FOX_2]
    assert sample[RENEE_3].thread == DANA_1


def test_signature_is_split_off(sample: dict[str, Record]) -> None:
    first = sample[DANA_1]
    assert first.text.endswith("Thanks,")
    assert first.signature == "Dana Whitfield\nInfrastructure, Example Org"
    assert first.quoted == ""


def test_mboxrd_from_lines_are_unescaped(sample: dict[str, Record]) -> None:
    assert "\nFrom now on the runner config lives in infra/ci/runners.toml." in sample[DANA_1].text
    # An unescaped "From " body line without a date does not start a new message.
    assert "From the rack layout (attached)" in sample[DANA_4].text


def test_top_posted_reply_with_wrapped_attribution(sample: dict[str, Record]) -> None:
    reply = sample[FOX_2]
    assert reply.text == (
        "Sounds good. Can we keep the old box around until Monday in case the\n"
        "nightly release job needs a rollback?\n\nFox"
    )
    assert reply.quoted.startswith("On Mon, Mar 4, 2024 at 3:15\u202fPM Dana Whitfield")
    assert "\nwrote:\n" in reply.quoted
    assert "> Builds will be down from 08:00 to 12:00 UTC." in reply.quoted


def test_inline_reply_keeps_new_text_in_order(sample: dict[str, Record]) -> None:
    reply = sample[RENEE_3]
    assert reply.text == (
        "Yes, I’ll leave it powered on until Monday noon.\n\n"
        "What about the artifact cache? It is 400 GB; copying it will take most of the window."
        "\n\nRenée"
    )
    assert reply.quoted.splitlines() == [
        "Fox Mulder <fox@example.org> wrote:",
        "> Sounds good. Can we keep the old box around until Monday in case the",
        "> nightly release job needs a rollback?",
        "",
        ">> Builds will be down from 08:00 to 12:00 UTC.",
    ]


def test_multipart_alternative_prefers_plain_text(sample: dict[str, Record]) -> None:
    text = sample[FOX_2].text
    assert "<div" not in text
    assert "gmail_quote" not in text


def test_html_only_message_becomes_readable_text(sample: dict[str, Record]) -> None:
    outlook = sample[PRIYA_6]
    assert outlook.text == "Two crêpes for me, please & one curry for Sam.\n\nThanks,\nPriya"
    assert outlook.quoted.startswith("-----Original Message-----\nFrom: Jürgen Müller")
    assert "for Friday the café offers crêpes" in outlook.quoted
    for noise in ("tracking", "MsoNormal", "<p", "<o:p>", "&nbsp;", "&lt;", "RE: Cafe menu"):
        assert noise not in outlook.text + outlook.quoted


def test_latin1_body(sample: dict[str, Record]) -> None:
    text = sample[JUERGEN_5].text
    assert "for Friday the café offers crêpes, Käsespätzle and a" in text
    assert text.endswith("Grüße,\nJürgen")


def test_attachments_are_named_not_read(sample: dict[str, Record]) -> None:
    record = sample[DANA_4]
    assert record.meta["attachments"] == ["rack-layout.pdf", "inventory.csv"]
    assert "%PDF" not in record.text
    assert "cache-01" not in record.text  # the CSV attachment is not body text
    assert all(r.meta["attachments"] == [] for r in sample.values() if r is not record)


def test_refs_and_lines_point_at_the_message(email_dir: Path, sample: dict[str, Record]) -> None:
    path = email_dir / "sample.mbox"
    data = path.read_bytes()
    lines = data.split(b"\n")
    assert [r.meta["index"] for r in sample.values()] == [1, 2, 3, 4, 5, 6]
    assert [r.meta["line"] for r in sample.values()][:2] == [1, 31]
    for record in sample.values():
        assert record.ref == f"{path}#{record.id}"
        assert lines[record.meta["line"] - 1].startswith(b"From ")
        assert data[record.meta["offset"] :].startswith(b"From ")


def test_damaged_mbox_reports_and_goes_on(email_dir: Path) -> None:
    path = email_dir / "damaged.mbox"
    ctx = ReadContext()
    _, records = read(MboxConnector(), path, ctx)
    assert ctx.problems == [
        Problem(str(path), "message 2 (line 10)", "no mail headers"),
        Problem(str(path), "message 4 (line 24)", "empty message"),
    ]
    assert [r.meta["index"] for r in records] == [1, 3, 5]
    assert records[0].title == "Ticket #4411: printer on the 3rd floor"


def test_missing_message_id_and_bad_date(email_dir: Path) -> None:
    _, records = read(MboxConnector(), email_dir / "damaged.mbox")
    odd = records[1]
    assert odd.time is None  # "Date: sometime last week"
    assert odd.id is not None
    assert odd.id.startswith("sha256:")
    assert odd.thread == odd.id
    assert odd.title == "Résumé of the week"  # raw Latin-1 bytes in the header
    assert odd.text == "A naïve question: can the café printer be fixed too?"  # x-klingon
    assert odd.author == odd.author_id == "sam@example.org"


def test_truncated_last_message_keeps_what_is_there(email_dir: Path) -> None:
    _, records = read(MboxConnector(), email_dir / "damaged.mbox")
    last = records[-1]
    assert last.id == "ticket-4412@helpdesk.example.org"
    assert last.text == "The projector manual you asked for is attached."
    assert last.meta["attachments"] == ["projector-manual.pdf"]


def test_not_mail_raises_when_iteration_starts(email_dir: Path) -> None:
    path = email_dir / "garbage.bin"
    [stream] = MboxConnector().read(path, ReadContext())
    with pytest.raises(SourceFormatError) as info:
        list(stream.records)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)


def test_mbox_without_envelope_line_is_one_message(tmp_path: Path, email_dir: Path) -> None:
    eml = (email_dir / "eml" / "welcome.eml").read_bytes()
    path = tmp_path / "saved.mbox"
    path.write_bytes(eml)
    _, records = read(MboxConnector(), path)
    assert [r.title for r in records] == ["Welcome to the infra rota"]


@pytest.mark.parametrize(
    ("junk", "where", "reason"),
    [
        (b"Content-Type: text/plain\n", "line 1", "1 line (25 bytes)"),
        (b"\n\nSubject: left over\n", "lines 1-3", "3 lines (21 bytes)"),
        (b"<pre>\r\n\r\n", "lines 1-2", "2 lines (9 bytes)"),
    ],
)
def test_lines_before_the_first_from_line_are_skipped_and_reported(
    tmp_path: Path, junk: bytes, where: str, reason: str
) -> None:
    path = tmp_path / "team"  # no .mbox suffix: detection must see the From line too
    path.write_bytes(junk + EXAMPLE_MBOX.read_bytes())
    assert detect_mbox(path) == 80
    ctx = ReadContext()
    _, records = read(MboxConnector(), path, ctx)
    assert ctx.problems == [
        Problem(
            str(path),
            where,
            f"{reason} before the first 'From ' line skipped: not part of any message",
        )
    ]
    _, clean = read(MboxConnector(), EXAMPLE_MBOX)
    assert len(records) == 12
    assert [(r.id, r.text, r.thread) for r in records] == [(r.id, r.text, r.thread) for r in clean]
    assert records[0].meta["line"] == junk.count(b"\n") + 1
    assert records[0].meta["offset"] == len(junk)


def test_a_from_line_past_the_first_lines_does_not_make_a_text_an_mbox(tmp_path: Path) -> None:
    # A note that quotes an envelope line: 16 lines are the bound.
    path = tmp_path / "notes.txt"
    lines = [f"note line {n}\n" for n in range(16)]
    path.write_text("".join(lines) + EXAMPLE_MBOX.read_text())
    assert detect_mbox(path) == 0
    [stream] = MboxConnector().read(path, ReadContext())
    with pytest.raises(SourceFormatError) as info:
        list(stream.records)
    assert (info.value.where, info.value.reason) == ("line 1", "not an mbox file (no 'From ' line)")
    # One line less and the envelope line is within the bound.
    path.write_text("".join(lines[1:]) + EXAMPLE_MBOX.read_text())
    assert detect_mbox(path) == 80
    ctx = ReadContext()
    assert len(read(MboxConnector(), path, ctx)[1]) == 12
    assert [p.where for p in ctx.problems] == ["lines 1-15"]


def test_headers_before_the_first_from_line_still_open_a_saved_message(tmp_path: Path) -> None:
    # Headers then a blank line: a message saved without its envelope line, then the mbox.
    path = tmp_path / "saved.mbox"
    path.write_bytes(
        b"Subject: saved alone\nMessage-ID: <saved@x.org>\n\nHello.\n" + EXAMPLE_MBOX.read_bytes()
    )
    ctx = ReadContext()
    _, records = read(MboxConnector(), path, ctx)
    assert ctx.problems == []
    assert [r.title for r in records][:1] == ["saved alone"]
    assert len(records) == 13


def test_empty_mbox_is_an_empty_mailbox(tmp_path: Path) -> None:
    path = tmp_path / "empty.mbox"
    path.write_bytes(b"\n")
    ctx = ReadContext()
    assert read(MboxConnector(), path, ctx)[1] == []
    assert ctx.problems == []


def _big_mbox(path: Path, count: int) -> None:
    body = "".join(f"line {i} of a long message body about the build server\n" for i in range(240))
    with path.open("w") as handle:
        for n in range(count):
            handle.write(
                f"From a@example.org Mon Mar  4 14:15:00 2024\nFrom: A <a@example.org>\n"
                f"Subject: message {n}\nMessage-ID: <m{n}@example.org>\n"
                f"Date: Mon, 4 Mar 2024 14:15:00 +0000\n\n{body}\n"
            )


def test_mbox_streams_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.mbox"
    _big_mbox(path, 250)
    size = path.stat().st_size
    assert size > 3_000_000
    [stream] = MboxConnector().read(path, ReadContext())
    tracemalloc.start()
    try:
        count = 0
        for _ in stream.records:
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 250
    # One message (~14 KB) and the thread map are held, never the file.
    assert peak < size / 4


def test_records_and_problems_interleave_as_the_stream_advances(email_dir: Path) -> None:
    events: list[str] = []
    ctx = ReadContext(on_problem=lambda problem: events.append(problem.where))
    [stream] = MboxConnector().read(email_dir / "damaged.mbox", ctx)
    assert events == []  # nothing is read before iteration
    for record in stream.records:
        events.append(f"record {record.meta['index']}")
    assert events == [
        "record 1",
        "message 2 (line 10)",
        "record 3",
        "message 4 (line 24)",
        "record 5",
    ]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_crash(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.mbox"
    path.write_bytes(b"From x@example.org Mon Mar  4 14:15:00 2024\nSubject: x\n" + data)
    ctx = ReadContext()
    _, records = read(MboxConnector(), path, ctx)
    assert len(records) + len(ctx.problems) >= 1
    for record in records:
        for text in (record.text, record.quoted, record.signature, record.title or ""):
            text.encode("utf-8")  # no lone surrogates: the store could not write them


# --------------------------------------------------------------------------- headers


def test_malformed_headers_do_not_crash(tmp_path: Path) -> None:
    path = tmp_path / "odd.eml"
    path.write_bytes(
        b"From: =?x-unknown-charset?Q?Ren=E9e?= <<renee@example.org\n"
        b"To: ;;;, undisclosed-recipients:;\n"
        b"Subject: =?utf-8?B?not*base64!?= and =?utf-8?Q?caf=C3=A9?=\n"
        b"Date: Mon, 32 Foo 2024 99:99:99 +9999\n"
        b"Message-ID: no brackets@example.org\n"
        b"In-Reply-To: Your message of Monday\n"
        b'Content-Type: text/plain; charset=""\n'
        b"\n"
        b"Body with a stray \xff byte.\n"
    )
    ctx = ReadContext()
    _, [record] = read(EmlConnector(), path, ctx)
    assert ctx.problems == []
    assert record.time is None
    assert record.id == "brackets@example.org"
    assert record.reply_to is None
    assert record.title is not None
    assert "café" in record.title
    assert record.text == "Body with a stray ÿ byte."


@pytest.mark.parametrize(
    ("header", "name", "address"),
    [
        (
            "Thorsten Hertel <Thorsten.Hertel@example.com>",
            "Thorsten Hertel",
            "thorsten.hertel@example.com",
        ),
        (
            "thorsten.hertel@example.com (Thorsten Hertel)",
            "Thorsten Hertel",
            "thorsten.hertel@example.com",
        ),
        (
            "Thorsten Hertel thorsten.hertel@example.com",
            "Thorsten Hertel",
            "thorsten.hertel@example.com",
        ),
        (
            "Hertel, Thorsten <thorsten.hertel@example.com>",
            "Hertel, Thorsten",
            "thorsten.hertel@example.com",
        ),
        (
            "thorsten.hertel at example.com (Thorsten Hertel)",
            "Thorsten Hertel",
            "thorsten.hertel@example.com",
        ),
        (
            "=?utf-8?q?J=C3=BCrgen_M=C3=BCller?= juergen@example.com",
            "Jürgen Müller",
            "juergen@example.com",
        ),
        ("Thorsten Hertel", "Thorsten Hertel", None),
        # A bare address, or one written twice (LISTSERV), names no person.
        ("thorsten.hertel@example.com", None, "thorsten.hertel@example.com"),
        (
            "THORSTEN.HERTEL@EXAMPLE.COM <thorsten.hertel@example.com>",
            None,
            "thorsten.hertel@example.com",
        ),
        (
            '"thorsten.hertel@example.com" <thorsten.hertel@example.com>',
            None,
            "thorsten.hertel@example.com",
        ),
        ("undisclosed-recipients:;", None, None),
    ],
)
def test_from_headers_as_archives_write_them(
    tmp_path: Path, header: str, name: str | None, address: str | None
) -> None:
    path = tmp_path / "one.eml"
    path.write_text(f"From: {header}\nSubject: x\nMessage-ID: <one@example.com>\n\nHello.\n")
    _, [record] = read(EmlConnector(), path)
    assert record.author == (name or address)
    assert record.author_id == address
    mentions, _ = record_mentions(record.text, [record], scope="email:one", kind=SourceKind.EMAIL)
    people = [m.entity_id for m in mentions if m.kind == "person"]
    assert people == ([f"person:{name.lower()}"] if name else [])


# --------------------------------------------------------------------------- Maildir


def read_streams(
    connector: Connector, path: Path, ctx: ReadContext | None = None
) -> list[tuple[SourceStream, list[Record]]]:
    return [(stream, list(stream.records)) for stream in connector.read(path, ctx or ReadContext())]


def test_maildir_reads_each_maildirpp_folder_by_date(email_dir: Path) -> None:
    path = email_dir / "Maildir"
    ctx = ReadContext()
    [(inbox, records), (archive, archived)] = read_streams(MaildirConnector(), path, ctx)
    assert ctx.problems == []
    # The fixture is a Maildir++ tree: .Archive/ is a folder of its own, so a source of its own.
    assert [(s.scope, s.platform, s.title, s.location) for s in (inbox, archive)] == [
        ("maildir:Maildir", "maildir", "Maildir", str(path)),
        ("maildir:Maildir/Archive", "maildir", "Archive", str(path / ".Archive")),
    ]
    # tmp/ (mail still being delivered), dovecot-uidlist and maildirfolder are not messages.
    assert [(r.meta["folder"], r.title) for r in records] == [
        ("", "[ALERT] disk usage on build-01"),
        ("", "Re: [ALERT] disk usage on build-01"),
        ("", "draft without a date"),  # undated messages sort last
    ]
    assert [(r.meta["folder"], r.title) for r in archived] == [
        (".Archive", "[RESOLVED] disk usage on build-01"),
    ]
    assert archived[0].time == datetime(2024, 3, 5, 11, 0, tzinfo=UTC)
    assert records[-1].time is None
    assert (
        records[1].ref == f"{path}/cur/1709820000.M1P4242.laptop:2,S#20240307140000.fox@example.org"
    )
    assert archived[0].meta["file"] == ".Archive/cur/1709636400.M0P4242.laptop:2,RS"


def test_maildir_with_a_scope_is_one_source_by_date(email_dir: Path) -> None:
    path = email_dir / "Maildir"
    stream, records = read(MaildirConnector(), path, ReadContext(scope="ops"))
    assert (stream.scope, stream.title, stream.location) == ("ops", "Maildir", str(path))
    assert [(r.meta["folder"], r.title) for r in records] == [
        (".Archive", "[RESOLVED] disk usage on build-01"),
        ("", "[ALERT] disk usage on build-01"),
        ("", "Re: [ALERT] disk usage on build-01"),
        ("", "draft without a date"),
    ]


def test_maildir_threads_follow_the_id_map(email_dir: Path) -> None:
    read_in = read_streams(MaildirConnector(), email_dir / "Maildir")
    alert, reply, _, resolved = [record for _, records in read_in for record in records]
    # The reply names only the "resolved" mail, whose own parent is not in the folder; the
    # resolved mail is in .Archive, a source read after the reply's, yet older than it.
    assert resolved.thread == "alert-9001@monitor.example.org"
    assert reply.thread == resolved.thread
    assert alert.thread == alert.id


def test_maildir_that_is_a_file_raises(email_dir: Path) -> None:
    [stream] = MaildirConnector().read(email_dir / "sample.mbox", ReadContext())
    with pytest.raises(SourceFormatError):
        list(stream.records)


# --------------------------------------------------------------------------- .eml


def test_single_eml(email_dir: Path) -> None:
    path = email_dir / "eml" / "welcome.eml"
    stream, [record] = read(EmlConnector(), path)
    assert (stream.scope, stream.platform) == ("email:welcome", "eml")
    assert record.time == datetime(2024, 3, 8, 16, 45, 12, tzinfo=UTC)
    assert record.author == "Sam Okafor"
    assert record.recipients == ("infra@example.org", "dana@example.org")
    assert record.text.endswith("Cheers,\nSam")
    assert "\r" not in record.text  # saved with CRLF line endings
    assert record.signature == "Sam Okafor - Site Reliability"
    assert record.ref == f"{path}#a3f5c2d1-0b9e-4c7a-8e21-5d6f7a8b9c0d@example.org"


def test_eml_folder_sorted_by_date(email_dir: Path) -> None:
    stream, records = read(EmlConnector(), email_dir / "eml")
    assert stream.scope == "email:eml"
    assert [r.meta["file"] for r in records] == ["welcome.eml", "re-welcome.eml"]
    assert records[1].thread == records[0].id
    assert records[1].text == "Welcome aboard! The runbook is in the wiki under Infra/On-call."
    assert records[1].quoted.startswith("On 08/03/2024 17:45, Sam Okafor wrote:\n> starting")


# --------------------------------------------------------------------------- bodies


@pytest.mark.parametrize(
    ("body", "text", "quoted", "signature"),
    [
        ("Hi\n\n-- \nAlice\nAcme", "Hi", "", "Alice\nAcme"),
        # "--" without the space is not a signature delimiter (and neither is a diff line).
        ("a\n--\nb", "a\n--\nb", "", ""),
        (
            "On Tue, Mar 12, 2024 at 9:00 AM Bob <bob@acme.io> wrote:\n> q1\n>\n> q2\n\nyes",
            "yes",
            "On Tue, Mar 12, 2024 at 9:00 AM Bob <bob@acme.io> wrote:\n> q1\n>\n> q2",
            "",
        ),
        ("> q1\nanswer 1\n\n> q2\nanswer 2", "answer 1\n\nanswer 2", "> q1\n\n> q2", ""),
        (
            "Le 29/12/2011 11:13, Allan a écrit :\n> Use install\n\nThanks",
            "Thanks",
            "Le 29/12/2011 11:13, Allan a écrit :\n> Use install",
            "",
        ),
        (
            "Fine.\n\n-----Original Message-----\nFrom: Bob\nSent: Monday\n\nold text",
            "Fine.",
            "-----Original Message-----\nFrom: Bob\nSent: Monday\n\nold text",
            "",
        ),
        (
            "ok\n\n________________________________\nFrom: Bob <bob@acme.io>\nold",
            "ok",
            "________________________________\nFrom: Bob <bob@acme.io>\nold",
            "",
        ),
        # A signature before the quoted message (top posting) ends where the quote begins.
        (
            "new\n-- \nsig\n\nOn Mon, Bob wrote:\n> old",
            "new",
            "On Mon, Bob wrote:\n> old",
            "sig",
        ),
        (" LK> supercite quote\n\nreply", "reply", " LK> supercite quote", ""),
        (
            "Fix it.\n---\n a.c | 2 +-\n\n-foo();;\n+foo();\n-- \n2.43.0\n",
            "Fix it.\n---\n a.c | 2 +-\n\n-foo();;\n+foo();",
            "",
            "2.43.0",
        ),
        (
            "text\n\n_______________________________________________\nnotmuch mailing list\nx",
            "text",
            "",
            "_______________________________________________\nnotmuch mailing list\nx",
        ),
    ],
)
def test_split_body(body: str, text: str, quoted: str, signature: str) -> None:
    assert split_body(body) == (text, quoted, signature)


@given(st.lists(st.sampled_from(["> q", ">> qq", "new", "", "-- ", "sig", "X wrote:"])))
def test_split_body_keeps_every_line(lines: list[str]) -> None:
    parts = split_body("\n".join(lines))

    def content(text: str) -> Counter[str]:
        return Counter(line for line in text.split("\n") if line.strip() and line != "-- ")

    assert content("\n".join(parts)) == content("\n".join(lines))


@pytest.mark.parametrize(
    ("markup", "text"),
    [
        ("<p>One</p><p>Two &amp; three</p>", "One\n\nTwo & three"),
        ("a<br>b<br/>c", "a\nb\nc"),
        ("<style>p {color: red}</style><script>x()</script><p>kept</p>", "kept"),
        ("<ul><li>one</li><li>two</li></ul>", "- one\n- two"),
        ("<div>hi</div><blockquote>old<br>older</blockquote>", "hi\n\n> old\n> older"),
        ("<p>code:</p><pre>  x = 1\n  y = 2</pre><p>end</p>", "code:\n\n  x = 1\n  y = 2\n\nend"),
        ("caf&eacute; &#8212; &lt;tag&gt;&nbsp;ok", "café — <tag> ok"),
    ],
)
def test_html_to_text(markup: str, text: str) -> None:
    assert html_to_text(markup) == text


@pytest.mark.parametrize(
    ("markup", "text"),
    [
        ("<a title='x > y'>link</a> after", "link after"),
        ('<img alt="a>b"/>text', "text"),
        ("<SCRIPT>if (a<b) {}</script >shown", "shown"),
        ("a <b and c", "a <b and c"),
        ("x <!-- never closed", "x <!-- never closed"),
        ("<p>unclosed <a href='x", "unclosed <a href='x"),
        ("<!DOCTYPE html><?xml x?>body", "body"),
    ],
)
def test_html_to_text_odd_markup(markup: str, text: str) -> None:
    assert html_to_text(markup) == text


@given(st.text(alphabet="<>/!?-'\"= apbr&;#x\n", max_size=60))
def test_html_to_text_takes_any_markup(markup: str) -> None:
    assert isinstance(html_to_text(markup), str)


# --------------------------------------------------------------------------- detection


def test_detect_scores(email_dir: Path, tmp_path: Path) -> None:
    bare = tmp_path / "inbox"
    bare.write_bytes((email_dir / "sample.mbox").read_bytes())
    note = tmp_path / "note.txt"
    note.write_text("From the desk of Alice: notes about Phoenix.\n")
    boxes = tmp_path / "Mail"
    for folder in ("work", "lists"):
        (boxes / folder / "cur").mkdir(parents=True)
    cases = {
        email_dir / "sample.mbox": (80, 0, 0),
        bare: (80, 0, 0),
        note: (40, 0, 0),
        email_dir / "garbage.bin": (0, 0, 0),
        email_dir / "Maildir": (0, 90, 0),
        boxes: (0, 70, 0),
        email_dir / "eml" / "welcome.eml": (0, 0, 90),
        email_dir / "eml": (0, 0, 70),
        email_dir: (0, 0, 0),
        tmp_path / "missing": (0, 0, 0),
    }
    for path, expected in cases.items():
        scores = (detect_mbox(path), detect_maildir(path), detect_eml(path))
        assert scores == expected, path


def test_registry_detection_picks_the_mail_connectors(email_dir: Path) -> None:
    # Needs every built-in connector module, since the registry imports them all.
    assert registry.detect(email_dir / "sample.mbox").name == "mbox"
    assert registry.detect(email_dir / "Maildir").name == "maildir"
    assert registry.detect(email_dir / "eml").name == "eml"
    assert registry.detect(email_dir / "eml" / "welcome.eml").name == "eml"
    assert registry.detect(EXAMPLE_MBOX).name == "mbox"


# --------------------------------------------------------------------------- demo workspace


def test_demo_workspace_mailbox() -> None:
    ctx = ReadContext()
    _, records = read(MboxConnector(), EXAMPLE_MBOX, ctx)
    assert ctx.problems == []
    assert len(records) == 12
    assert {r.author for r in records} == {"Alice Chen", "Bob Martins", "Carol Diaz"}
    assert len({r.thread for r in records}) == 3
    assert all(r.time is not None and r.time.year == 2024 and r.time.month == 3 for r in records)
    decision = next(r for r in records if r.text.startswith("Decision: we drop Redis"))
    assert decision.time == datetime(2024, 3, 12, 23, 20, tzinfo=UTC)
    assert "April 5" in next(r for r in records if r.text.startswith("Confirmed:")).text


# --------------------------------------------------------------------------- real samples


def test_lkml_maildir(shared_data: Path) -> None:
    path = shared_data / "email" / "lkml-maildir"
    ctx = ReadContext()
    stream, records = read(MaildirConnector(), path, ctx)
    assert ctx.problems == []
    assert stream.scope == "maildir:lkml-maildir"  # no Maildir++ folders: one source
    assert len(records) == 210
    assert all(r.time is not None and r.author_id for r in records)
    threads = Counter(r.thread for r in records)
    # Checked against a union-find over all Message-ID/References/In-Reply-To links.
    assert len(threads) == 19
    assert threads["cover.1289789604.git.joe@perches.com"] == 100  # [PATCH 00/44] semicolons
    # "[PATCH 2/2] notmuch-new" has "References: <yes> <...-1-...>"; the bogus id is ignored.
    patch = next(
        r for r in records if r.id == "1258848661-4660-2-git-send-email-stefan@datenfreihafen.org"
    )
    assert patch.thread == "1258848661-4660-1-git-send-email-stefan@datenfreihafen.org"
    assert "diff --git a/Makefile b/Makefile" in patch.text  # patches are body text
    assert patch.signature == "1.6.5.3"


def test_notmuch_maildir(shared_data: Path) -> None:
    path = shared_data / "email" / "notmuch-list-maildir"
    ctx = ReadContext()
    stream, records = read(MaildirConnector(), path, ctx)
    assert ctx.problems == []
    # Plain sub-Maildirs are not Maildir++ folders: the tree stays one source.
    assert stream.scope == "maildir:notmuch-list-maildir"
    # Messages live in cur/ and new/, in sub-Maildirs (foo, bar/baz) and loose in folders.
    assert len(records) == 53
    assert all(r.time is not None and r.author_id for r in records)
    assert [r.time for r in records] == sorted(r.time for r in records if r.time)
    threads = Counter(r.thread for r in records)
    assert len(threads) == 24
    assert threads["20091117190054.GU3165@dottiness.seas.harvard.edu"] == 7  # Maildir storage?
    freebsd = next(r for r in records if r.title == "[notmuch] preliminary FreeBSD support")
    assert freebsd.meta["attachments"] == [
        "0001-Deal-with-situation-where-sysconf-_SC_GETPW_R_SIZE_M.patch"
    ]
    assert "get_name_from_passwd_file" in freebsd.text  # an attached patch is still content
    french = next(r for r in records if r.id == "4EFC743A.3060609@april.org")
    assert french.text == "Thank you Allan"
    assert french.quoted.startswith("Le 29/12/2011 11:13, Allan McRae a écrit :")


def test_real_samples_are_detected(shared_data: Path) -> None:
    for name in ("lkml-maildir", "notmuch-list-maildir"):
        path = shared_data / "email" / name
        assert detect_maildir(path) == 90
        assert registry.detect(path).name == "maildir"
