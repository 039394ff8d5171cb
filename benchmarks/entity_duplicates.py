"""Duplicate person entities, before and after entity resolution.

Each workspace is ingested into a new store (no embeddings). The **reference** of who is who
is read straight from the raw files by this script, with its own parsers, not the
connectors': every mail ``From`` header gives an address and a name (Python's
``email.utils.parseaddr``), a Slack ``users.json`` profile gives a real name with its display
name, user name and email, a DiscordChatExporter author object a nickname (else user name)
with its user name, and a note in a ``people/`` folder its title.

The **candidates** are the store's ids that can name a person: every id of kind ``person``,
``email``, ``handle`` or ``note`` that a chunk mentions or a fact has as its subject. A
candidate names the reference person whose normalised full name (lowercased, spaces
collapsed) is its value (``person:carol diaz``, ``note:people/carol diaz``), or whose
address, display name or user name it is (``email:carol@acme.io``, ``person:carol``,
``handle:carol``); others are left out.

A **duplicate group** is a reference person named by two or more candidates that are
different entities. *Before*: every id is its own entity (what the store had without
resolution). *After*: ids are one entity when they resolve to the same canonical id
(``store.entity_resolution()``, as the owner reads the store). ``extra entities`` is the sum
over people of (entities naming them − 1). The reference holds what the files state, as the
connectors read it too: the count checks that every id those statements reach ends in one
entity, end to end through ingest, extraction and resolution; not that the statements are
right.

    python benchmarks/entity_duplicates.py [--data ../shared/data]

Writes ``benchmarks/results/entity_duplicates.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import email
import json
import mailbox
import os
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator
from email.utils import parseaddr
from pathlib import Path
from typing import Any

from run_info import git_state, machine, write_results
from stratamem.api import Memory

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
KINDS = ("person", "email", "handle", "note")


def norm(text: str) -> str:
    return " ".join(text.strip().lower().split())


class Reference:
    """Who is who per the raw files: each key (a normalised name, an address, a display or
    user name) → the person's normalised full name."""

    def __init__(self) -> None:
        self.key_to_person: dict[str, str] = {}

    def person(self, full: str, *keys: str) -> None:
        full = norm(full)
        if not full or "@" in full:
            return
        self.key_to_person.setdefault(full, full)
        for key in keys:
            if key and norm(key):
                self.key_to_person.setdefault(norm(key), full)

    def of(self, entity_id: str) -> str | None:
        kind, _, value = entity_id.partition(":")
        if kind == "note":
            value = value.rsplit("/", 1)[-1]
        return self.key_to_person.get(norm(value))


def read_mail(messages: Iterable[Any], ref: Reference) -> None:
    for message in messages:
        name, address = parseaddr(str(message.get("From", "")))
        if name and address and "@" in address:
            ref.person(name, address.lower())


def _maildir(root: Path) -> Iterator[Any]:
    """Every message file of a Maildir (``cur/`` and ``new/``, either may be missing)."""
    for path in sorted(root.glob("*/*")):
        if path.parent.name in ("cur", "new") and path.is_file():
            yield email.message_from_bytes(path.read_bytes())


def read_slack_users(users: list[dict[str, Any]], ref: Reference) -> None:
    for user in users:
        profile = user.get("profile") or {}
        real = profile.get("real_name") or user.get("real_name") or user.get("name") or ""
        ref.person(
            real,
            profile.get("display_name") or "",
            user.get("name") or "",
            (profile.get("email") or "").lower(),
        )


def read_discord(files: Iterable[Path], ref: Reference) -> None:
    for path in files:
        for message in json.loads(path.read_text("utf-8")).get("messages", []):
            author = message.get("author") or {}
            shown = author.get("nickname") or author.get("name") or ""
            ref.person(shown, author.get("name") or "")


def read_people_notes(root: Path, ref: Reference) -> None:
    for path in root.rglob("*.md"):
        if "people" in {p.lower() for p in path.relative_to(root).parts[:-1]}:
            ref.person(path.stem)


def candidates(memory: Memory) -> list[str]:
    store = memory.store
    found = {m.canonical_id for m in store.entity_stats(_all_ids(memory))}
    found |= set(store.fact_mentions(store.search_named_entities("", 1_000_000)))
    return sorted(e for e in found if e.partition(":")[0] in KINDS)


def _all_ids(memory: Memory) -> list[str]:
    ids: set[str] = set()
    for kind in KINDS:
        ids.update(m.canonical_id for m in memory.store.search_entities(":", (kind,), 1_000_000))
    return sorted(ids)


def count(memory: Memory, ref: Reference) -> dict[str, Any]:
    resolution = memory.store.entity_resolution()
    people: dict[str, list[str]] = {}
    for entity in candidates(memory):
        who = ref.of(entity)
        if who is not None:
            people.setdefault(who, []).append(entity)
    before = {p: len(ids) for p, ids in people.items()}
    after = {p: len({resolution.canonical(e) for e in ids}) for p, ids in people.items()}
    left = {p: ids for p, ids in people.items() if after[p] > 1}
    return {
        "people": len(people),
        "candidate_ids": sum(before.values()),
        "groups_before": sum(1 for n in before.values() if n > 1),
        "groups_after": sum(1 for n in after.values() if n > 1),
        "extra_before": sum(n - 1 for n in before.values()),
        "extra_after": sum(n - 1 for n in after.values()),
        "left": {p: sorted(ids) for p, ids in sorted(left.items())[:10]},
    }


def workspaces(data: Path) -> Iterator[tuple[str, list[tuple[Path, str | None]], Reference]]:
    example = ROOT / "examples" / "workspace"
    ref = Reference()
    read_slack_users(json.loads((example / "slack-export" / "users.json").read_text()), ref)
    read_mail(mailbox.mbox(example / "mail" / "team.mbox"), ref)
    read_people_notes(example / "notes", ref)
    yield (
        "example workspace",
        [
            (example / "slack-export", None),
            (example / "mail" / "team.mbox", None),
            (example / "notes", "notes:phoenix"),
        ],
        ref,
    )
    slack = data / "chat" / "slack-export-viewer" / "testarchive.zip"
    if slack.exists():
        ref = Reference()
        with zipfile.ZipFile(slack) as zf:
            name = next(n for n in zf.namelist() if n.endswith("users.json"))
            read_slack_users(json.loads(zf.read(name)), ref)
        yield "slack-export-viewer", [(slack, None)], ref
    discord = data / "chat" / "discord-exporter-frontend" / "example_guild"
    if discord.exists():
        ref = Reference()
        read_discord(discord.rglob("*.json"), ref)
        yield "discord-exporter-frontend", [(discord, None)], ref
    for folder in ("notmuch-list-maildir", "lkml-maildir"):
        maildir = data / "email" / folder
        if maildir.exists():
            ref = Reference()
            read_mail(_maildir(maildir), ref)
            yield folder, [(maildir, None)], ref
    notes = data / "notes" / "til"
    if notes.exists():
        ref = Reference()
        read_people_notes(notes, ref)
        yield "notes/til", [(notes, None)], ref


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Duplicate person entities, before and after resolution",
        "",
        f"Run {report['when']} on {report['machine']['cpus_used']} CPUs "
        f"(load {report['machine']['load_start']}), commit {report['git']['head'][:12]}"
        f"{' (modified)' if report['git']['modified'] else ''}. See the script's docstring "
        "for the definitions. The reference is what the files state (From headers, Slack and "
        "Discord profiles, people notes), read by the script's own parsers: the count checks "
        "that every id those statements reach ends in one entity, not that the statements "
        "are right.",
        "",
        "| workspace | people | candidate ids | groups before | groups after "
        "| extra entities before | extra entities after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in report["workspaces"].items():
        lines.append(
            f"| {name} | {r['people']} | {r['candidate_ids']} | {r['groups_before']} "
            f"| {r['groups_after']} | {r['extra_before']} | {r['extra_after']} |"
        )
    lines.append("")
    for name, r in report["workspaces"].items():
        if r["left"]:
            lines.append(f"Still apart in {name}: " + json.dumps(r["left"]))
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    for name, paths, ref in workspaces(args.data):
        with (
            tempfile.TemporaryDirectory() as folder,
            Memory(Path(folder) / "store.db", embedder=None) as memory,
        ):
            for path, scope in paths:
                memory.ingest(path, scope=scope)
            results[name] = count(memory, ref)
        print(name, {k: v for k, v in results[name].items() if k != "left"})
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "workspaces": results,
    }
    write_results(args.out, "entity_duplicates", report, markdown(report))


if __name__ == "__main__":
    main()
