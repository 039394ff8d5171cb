"""Fuzzed Slack exports: the fixture export, mutated, written as a folder or a zip (by rng).

Mutations: wrong types for any field of any message, user or channel entry; whole files
replaced, cut, flipped or turned into nesting bombs; odd channel names (``..``, ``a/b``,
surrogates); duplicate entries; extra day files; and for zips, members with ``..``, absolute
or backslashed paths, duplicated members, corrupt compressed bytes, a highly compressible
member of a few megabytes, or a cut archive; for folders, a FIFO or a device link where a day
file should be.
"""

from __future__ import annotations

import io
import json
import os
import random
import warnings
import zipfile
from pathlib import Path
from typing import Any

from json_mutations import corrupt_member, damage, dumps, mutate_value, odd_value

NAME = "slack"
CONNECTOR = "slack"

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "slack"


def _fixture() -> dict[str, Any]:
    return {
        file.relative_to(FIXTURE).as_posix(): json.loads(file.read_text("utf-8"))
        for file in sorted(FIXTURE.rglob("*.json"))
    }


_FILES = _fixture()


def make(rng: random.Random, root: Path) -> Path:
    files: dict[str, Any] = json.loads(json.dumps(_FILES))
    for _ in range(rng.randint(1, 4)):
        _mutate(rng, files)
    written = {name: dumps(value, rng) for name, value in files.items()}
    for _ in range(rng.choice((0, 0, 1, 2))):
        name = rng.choice(sorted(written))
        written[name] = damage(rng, written[name])
    if rng.random() < 0.5:
        return _as_zip(rng, written, root)
    return _as_folder(rng, written, root)


def _mutate(rng: random.Random, files: dict[str, Any]) -> None:
    action = rng.randrange(10)
    day_names = [n for n in files if "/" in n]
    if action <= 3 and day_names:
        name = rng.choice(day_names)
        files[name] = mutate_value(rng, files[name])
    elif action == 4:
        name = rng.choice(["users.json", "channels.json"])
        if name in files:
            files[name] = mutate_value(rng, files[name])
    elif action == 5 and "channels.json" in files and isinstance(files["channels.json"], list):
        entry = {
            "id": "C0ODD",
            "name": rng.choice(["..", "a/b", ".", "", "\ud800", "eng", "x" * 300]),
        }
        files["channels.json"].append(entry)
    elif action == 6:
        del files[rng.choice(sorted(files))]
    elif action == 7:
        folder = rng.choice(["eng", "general", "random", "..", "D0ODD"])
        day = rng.choice(["2024-03-13.json", "2024-13-45.json", "0000-00-00.json"])
        files[f"{folder}/{day}"] = [
            {"type": "message", "ts": odd_value(rng), "user": "U01AAAA0001", "text": "odd day"},
            {"type": "message", "ts": "1710400000.000100", "text": odd_value(rng)},
        ]
    elif action == 8 and day_names:
        name = rng.choice(day_names)
        files[name] = odd_value(rng)
    elif day_names:
        # One message of each kind of wrong field, all in one day file.
        name = rng.choice(day_names)
        if isinstance(files[name], list):
            for message in files[name]:
                if isinstance(message, dict):
                    message[rng.choice(["subtype", "ts", "text", "files", "user"])] = odd_value(rng)


def _as_zip(rng: random.Random, written: dict[str, bytes], root: Path) -> Path:
    prefix = rng.choice(["", "export/", "Slack export Mar 2024/"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in sorted(written.items()):
            method = rng.choice([zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
            zf.writestr(zipfile.ZipInfo(prefix + name), data, compress_type=method)
        for _ in range(rng.choice((0, 0, 1, 2))):
            odd = rng.choice(
                [
                    f"{prefix}../2024-01-01.json",
                    f"{prefix}eng/../../escape/2024-01-01.json",
                    "/abs/eng/2024-01-02.json",
                    f"{prefix}eng\\2024-01-03.json",
                    "C:/eng/2024-01-04.json",
                    f"{prefix}eng/2024-03-11.json",  # a duplicate member
                    f"{prefix}eng/./2024-03-14.json",
                ]
            )
            with warnings.catch_warnings():  # a duplicate member is the point
                warnings.simplefilter("ignore")
                zf.writestr(odd, b'[{"type": "message", "ts": "1704067200.000100", "text": "o"}]')
        if rng.random() < 0.1:
            with zf.open(f"{prefix}eng/2024-03-15.json", "w") as member:
                member.write(b"[")
                block = b" " * (1 << 20)
                for _ in range(rng.randint(1, 4)):
                    member.write(block)
                member.write(b"]")
    archive = bytearray(buffer.getvalue())
    if rng.random() < 0.3:
        with zipfile.ZipFile(io.BytesIO(bytes(archive))) as zf:
            infos = zf.infolist()
        corrupt_member(archive, rng.choice(infos), rng)
    if rng.random() < 0.05:
        archive = archive[: rng.randrange(len(archive))]
    path = root / "export.zip"
    path.write_bytes(bytes(archive))
    return path


def _as_folder(rng: random.Random, written: dict[str, bytes], root: Path) -> Path:
    folder = root / "export"
    folder.mkdir()
    for name, data in written.items():
        if name.startswith("../"):
            continue
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    odd = rng.random()
    channel = folder / "eng"
    channel.mkdir(exist_ok=True)
    if odd < 0.05 and hasattr(os, "mkfifo"):
        os.mkfifo(channel / "2024-03-16.json")
    elif odd < 0.1 and Path("/dev/zero").exists():
        (channel / "2024-03-17.json").symlink_to("/dev/zero")
    elif odd < 0.15:
        (channel / "2024-03-18.json").mkdir()
    elif odd < 0.2:
        (channel / "2024-03-19.json").symlink_to(folder / "missing.json")
    return folder
