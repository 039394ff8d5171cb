"""Mutations shared by the text case modules (Markdown, IRC, mbox, Maildir, .eml).

Text is damaged as bytes (cut, flipped, not UTF-8, CR-only, a BOM, NULs, an encoded lone
surrogate, a long line built to defeat backtracking); folders get what must never be read as a
file (a FIFO, a link to a device) and names that are not UTF-8. Mail messages get headers at the
calendar's edge, charsets Python knows but mail does not, bad base64, deep multiparts and HTML
that never closes its tags.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

EDGE_DATES = (
    "0001-01-01 00:00:00+05:00",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31 23:59:59-05:00",
    "9999-12-31T23:59:59.999999-14:00",
    "0001-01-01",
    "9999-12-31",
    "2024-02-30",
    "2024-03-12T25:61:00",
    "10000-01-01",
    "0000-00-00",
)
# Lines built so that a backtracking pattern scanning them from every start is quadratic.
LONG_PATTERNS = (
    "`a``b```c",
    "[a](b",
    "[a](b (",
    "[a](<",
    "[[a",
    "#a ",
    "<a ",
    "* ",
    "=?a?q?",
    "a@",
    "<<",
    "> ",
    "-- ",
    "\t",
    " ",
    "x",
    "<a b='",
    "<!--",
    "On x wrote:",
)
ODD_TEXT = (
    "\ud800",
    "half \udbff pair",
    "\x00nul",
    "\u202eevil",
    "\ufeffbom",
    "\r",
    "#fff #e66465 #tag",
    "[[link|alias#x]]",
    "```\nunclosed fence",
)


def long_line(rng: random.Random, *, limit: int = 200_000) -> str:
    """One line of a repeated pathological pattern, a few KB to ``limit`` characters."""
    pattern = rng.choice(LONG_PATTERNS)
    size = rng.choice((4_000, 40_000, limit))
    return pattern * (size // len(pattern))


def to_bytes(rng: random.Random, text: str) -> bytes:
    """``text`` as UTF-8, lone surrogates written as the bytes a careless encoder emits."""
    return text.encode("utf-8", "surrogatepass" if rng.random() < 0.5 else "replace")


def damage(rng: random.Random, data: bytes) -> bytes:
    """``data`` with one to three byte-level faults."""
    for _ in range(rng.randint(1, 3)):
        data = _fault(rng, data)
    return data


def _fault(rng: random.Random, data: bytes) -> bytes:
    pick = rng.randrange(12)
    at = rng.randrange(len(data) + 1)
    if pick == 0:
        return data[:at]
    if pick == 1 and data:
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        return bytes(flipped)
    if pick == 2:
        return (
            data[:at] + rng.choice((b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80" * 3)) + data[at:]
        )
    if pick == 3:
        return data.replace(b"\n", b"\r\n")
    if pick == 4:
        return data.replace(b"\n", b"\r")
    if pick == 5:
        return rng.choice((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")) + data
    if pick == 6:
        return data[:at] + b"\x00" * rng.randint(1, 4) + data[at:]
    if pick == 7:
        return data[:at] + b"\n" + long_line(rng).encode() + b"\n" + data[at:]
    if pick == 8:
        piece = data[at : at + rng.randint(1, 400)]
        return data[:at] + piece * rng.randint(2, 20) + data[at:]
    if pick == 9:
        return b""
    if pick == 10:
        return data[:at] + to_bytes(rng, rng.choice(ODD_TEXT)) + data[at:]
    return data.replace(b"\n", b"\n" * rng.randint(2, 5))


def odd_name(rng: random.Random, suffix: str) -> str:
    """A file name that is not UTF-8, very long, or full of odd characters."""
    pick = rng.randrange(4)
    if pick == 0:
        return os.fsdecode(b"\xff\xfe-" + bytes([rng.randrange(0x80, 0x100)])) + suffix
    if pick == 1:
        return "n" * (250 - len(suffix)) + suffix
    if pick == 2:
        return "-rf \n\t name" + suffix
    return "9999-12-31_23" + suffix


def add_irregular(rng: random.Random, folder: Path, name: str) -> None:
    """Put something that is no regular file at ``folder/name``: a FIFO or a device link."""
    target = folder / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():
        target.unlink()
    if rng.random() < 0.6 and hasattr(os, "mkfifo"):
        os.mkfifo(target)
    else:
        target.symlink_to(rng.choice(("/dev/zero", "/dev/null", "/dev/urandom")))


# --------------------------------------------------------------------------- mail

ODD_CHARSETS = (
    "utf-7",
    "punycode",
    "idna",
    "unicode_escape",
    "raw_unicode_escape",
    "utf-16",
    "utf-32",
    "x-unknown",
    "rot13",
    "base64",
    "zlib",
    "undefined",
    "",
    "utf-8\x00",
)
MAIL_DATES = (
    "Mon, 1 Jan 0001 00:00:00 +0500",
    "Fri, 31 Dec 9999 23:59:59 -0500",
    "Fri, 31 Dec 9999 23:59:59 -9999",
    "32 Foo 2024 25:61:61 +0000",
    "0",
    "Tue, 5 Mar 99999999999999999999 10:00 +0000",
    "",
)


def odd_header(rng: random.Random) -> bytes:
    """One header line (or a few) that a careless reader breaks on."""
    pick = rng.randrange(10)
    if pick == 0:
        return b"Date: " + rng.choice(MAIL_DATES).encode()
    if pick == 1:
        return b"Subject: " + (long_line(rng, limit=60_000)).encode()
    if pick == 2:
        return b"From: " + rng.choice((b"<" * 20_000, b'"' * 20_000, b"(" * 5_000, b"a" * 50_000))
    if pick == 3:
        refs = b" ".join(b"<%d@x>" % i for i in range(rng.choice((10, 1000, 5000))))
        return b"References: " + refs
    if pick == 4:
        return b"Message-ID: " + rng.choice((b"<>", b"<\xff\xfe@x>", b"<a b@c>", b"x" * 5000))
    if pick == 5:
        return b"Cc: " + (b"a" * rng.choice((1000, 100_000))) + b"@" + b"b" * 1000
    if pick == 6:
        return b"Subject: =?" + rng.choice(ODD_CHARSETS).encode() + b"?B?2AA=?= =?utf-8?Q?caf=C3?="
    if pick == 7:
        return b"X-Long: " + b"x" * rng.choice((100_000, 1_000_000))
    if pick == 8:
        return b"Content-Type: multipart/mixed"  # no boundary
    return b"\xff\xfe: \x00\xed\xa0\x80"


def odd_body(rng: random.Random) -> bytes:
    """Content-Type and body of a message: bad charsets, base64, nested parts, odd HTML."""
    pick = rng.randrange(6)
    if pick == 0:
        charset = rng.choice(ODD_CHARSETS).encode()
        return (
            b'Content-Type: text/plain; charset="' + charset + b'"\n\n+2AA- \\ud800 xn--caf-dma\n'
        )
    if pick == 1:
        return b"Content-Type: text/plain\nContent-Transfer-Encoding: base64\n\n" + rng.choice(
            (b"!!!not base64===\n", b"YWJj\n" * 1000, b"YW=Jj\nZ\n", b"=")
        )
    if pick == 2:
        depth = rng.choice((5, 50, 400, 3000))
        head = b"".join(
            b'Content-Type: multipart/mixed; boundary="b%d"\n\n--b%d\n' % (i, i)
            for i in range(depth)
        )
        tail = b"".join(b"\n--b%d--\n" % i for i in reversed(range(depth)))
        return head + b"Content-Type: text/plain\n\ninner text\n" + tail
    if pick == 3:
        markup = rng.choice(("<a", "<a b='", '<a b="<c>"', "<!--", "</", "<script>", "<p>x"))
        size = rng.choice((1_000, 50_000, 300_000))
        return (
            b"Content-Type: text/html; charset=utf-8\n\n"
            + (markup * (size // len(markup))).encode()
        )
    if pick == 4:
        return (
            b"Content-Type: multipart/alternative; boundary=x\n\n--x\nContent-Type: text/html\n\n"
            b"<p>only html &#xD800; &#99999999; &bogus;</p>\n--x\nContent-Type: application/pdf;"
            b' name="=?utf-7?B?K2RBQS0=?="\nContent-Disposition: attachment\n\n%PDF\n--x--\n'
        )
    return (
        b"Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: quoted-printable\n\n"
        + b"=ED=A0=80 =FF =\n" * rng.randint(1, 100)
    )


def mutate_message(rng: random.Random, message: bytes) -> bytes:
    """One mail message (headers, blank line, body) with odd headers, an odd body or damage."""
    head, sep, body = message.partition(b"\n\n")
    pick = rng.randrange(4)
    if pick == 0:
        extra = b"\n".join(odd_header(rng) for _ in range(rng.randint(1, 3)))
        return head + b"\n" + extra + sep + body
    if pick == 1:
        kept = b"\n".join(
            line for line in head.split(b"\n") if not line.lower().startswith(b"content-")
        )
        return kept + b"\nMIME-Version: 1.0\n" + odd_body(rng)
    if pick == 2:
        return damage(rng, message)
    return head + sep + to_bytes(rng, long_line(rng) + rng.choice(ODD_TEXT))
