"""Fuzzed DiscordChatExporter exports: the fixture channels, mutated, as one file or a folder.

Mutations: wrong types for any field of any message (``mentions`` an int, ``type`` a list,
``timestamp`` at the calendar's edge), the guild, channel and messages replaced or removed, a
long topic that pushes the header past the first bytes, whole files cut, flipped or turned
into nesting bombs, other JSON files beside the exports, ``*_Files`` asset folders, a FIFO.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from json_mutations import damage, dumps, mutate_value, odd_value

NAME = "discord"
CONNECTOR = "discord"

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "discord"
_DOCS = {file.name: json.loads(file.read_text("utf-8")) for file in sorted(FIXTURE.glob("*.json"))}


def make(rng: random.Random, root: Path) -> Path:
    docs: dict[str, Any] = json.loads(json.dumps(_DOCS))
    for _ in range(rng.randint(1, 4)):
        name = rng.choice(sorted(docs))
        docs[name] = _mutate(rng, docs[name])
    written = {name: dumps(doc, rng) for name, doc in docs.items()}
    for _ in range(rng.choice((0, 0, 1))):
        name = rng.choice(sorted(written))
        written[name] = damage(rng, written[name])
    if rng.random() < 0.3:
        name = rng.choice(sorted(written))
        path = root / name
        path.write_bytes(written[name])
        return path
    folder = root / "exports"
    folder.mkdir()
    for name, data in written.items():
        (folder / name).write_bytes(data)
    odd = rng.random()
    if odd < 0.1:
        (folder / "settings.json").write_bytes(dumps(odd_value(rng), rng))
    elif odd < 0.15:
        assets = folder / "eng.json_Files"
        assets.mkdir()
        (assets / "x.json").write_bytes(next(iter(written.values())))
    elif odd < 0.2 and hasattr(os, "mkfifo"):
        os.mkfifo(folder / "pipe.json")
    elif odd < 0.25:
        (folder / "nested").mkdir()
        (folder / "nested" / "copy.json").write_bytes(next(iter(written.values())))
    return folder


def _mutate(rng: random.Random, doc: Any) -> Any:
    if not isinstance(doc, dict):
        return mutate_value(rng, doc)
    action = rng.randrange(10)
    messages = doc.get("messages")
    if action <= 4 and isinstance(messages, list) and messages:
        at = rng.randrange(len(messages))
        messages[at] = mutate_value(rng, messages[at])
    elif action == 5 and isinstance(messages, list):
        field = rng.choice(
            ["mentions", "type", "timestamp", "content", "author", "reference", "id", "reactions"]
        )
        for message in messages:
            if isinstance(message, dict):
                message[field] = odd_value(rng)
    elif action == 6:
        doc[rng.choice(["guild", "channel", "messages"])] = odd_value(rng)
    elif action == 7:
        doc.pop(rng.choice(["guild", "channel", "messages"]), None)
    elif action == 8 and isinstance(doc.get("channel"), dict):
        doc["channel"]["topic"] = "t" * rng.choice((20_000, 40_000))
    else:
        doc = mutate_value(rng, doc)
    return doc
