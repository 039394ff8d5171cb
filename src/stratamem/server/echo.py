"""No answer of a server's door repeats what its caller sent in an error.

An error's message is shared by every door: at a terminal, quoting back what the user typed
helps (``no source 'slack:#eng'``). Sent over HTTP or MCP, the same quote hands a caller's
text back to whatever reads the answer: a page that shows it, a model that follows it, a log
that keeps it. So the servers answer an error with each value the caller sent (and each
name it gave that is not a parameter) replaced by the parameter's name in angle brackets:
``show: no node <node_id>``. The operation's own checks (:func:`~stratamem.ops.spec.bind`)
name the parameter and the rule and never the value, so for them nothing changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

# A value shorter than this is replaced where it is quoted, not where it stands bare: a short
# word (``team``, ``eng``) is as likely the message's own.
BARE_MIN = 8
# How deep into nested lists and objects the values sent are collected.
DEPTH = 4


def sent(
    args: Mapping[str, Any] | None, *, known: Collection[str] = (), **more: str
) -> dict[str, str]:
    """Each text the caller sent in ``args`` (and ``more``: a tool's name, say), by the name
    it was sent under; a name that is none of the ``known`` parameters is itself a value
    sent, as ``name``. What is one of the ``known`` names is the server's own word, and
    left as it is."""
    found: dict[str, str] = {}
    for label, value in more.items():
        if value and value not in known:
            found.setdefault(value, label)
    if isinstance(args, Mapping):
        for key, value in args.items():
            name = str(key)
            if name not in known:
                found.setdefault(name, "name")
            for text in _texts(value, DEPTH):
                if text not in known:
                    found.setdefault(text, name if name in known else "name")
    return found


def _texts(value: Any, depth: int) -> Iterator[str]:
    if isinstance(value, str):
        if value:
            yield value
    elif depth > 0 and isinstance(value, Mapping):
        for key, inner in value.items():
            yield str(key)
            yield from _texts(inner, depth - 1)
    elif depth > 0 and isinstance(value, list | tuple):
        for inner in value:
            yield from _texts(inner, depth - 1)


def without_echo(message: str, values: Mapping[str, str]) -> str:
    """``message`` with each of ``values`` (text → the name it was sent under) replaced by
    ``<name>``: quoted as Python or JSON quotes it, and bare (not inside a longer word: a
    date sent, ``2024-03-01``, stays in the time the message made of it) where it is long
    enough not to be a word of the message's own. Longer values first, so that one holding
    another goes whole."""
    for value in sorted(values, key=len, reverse=True):
        shown = f"<{values[value]}>"
        for form in (
            repr(value),
            json.dumps(value),
            json.dumps(value, ensure_ascii=False),
            f"'{value}'",
            f'"{value}"',
        ):
            message = message.replace(form, shown)
        long_enough = len(value) >= BARE_MIN or not value.isalnum()
        if long_enough and (len(value.strip()) >= 3 or not value.isascii()):
            parts = re.split(rf"(?<!\w){re.escape(value)}(?!\w)", message)
            message = shown.join(parts)
    return message
