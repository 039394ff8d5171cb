"""The connector registry: built-ins loaded on demand, detection over every connector."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from stratamem import plugins
from stratamem.errors import RegistryError, UnknownFormatError
from stratamem.ingest import registry
from stratamem.ingest.connectors import mbox, slack
from stratamem.ingest.model import ReadContext, SourceStream

BUILT_IN = ["discord", "eml", "irc", "jsonl", "maildir", "markdown", "mbox", "slack"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"


@pytest.fixture
def group(monkeypatch: pytest.MonkeyPatch) -> list[EntryPoint]:
    """The connector entry points, with a fresh registry."""
    found: list[EntryPoint] = []

    def entry_points(*, group: str) -> list[EntryPoint]:
        assert group == "stratamem.connectors"
        return found

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    monkeypatch.setattr(registry, "CONNECTORS", registry.CONNECTORS.copy())
    return found


class Notes:
    """Plain .notes files.

    More words."""

    name = "notes"

    @staticmethod
    def detect(path: Path) -> int:
        return 100 if path.suffix == ".notes" else 0

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        return iter(())


class Undetectable:
    name = "undetectable"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        return iter(())


def test_the_built_ins(group: list[EntryPoint]) -> None:
    names = registry.names()
    assert set(BUILT_IN) <= set(names)
    assert names == sorted(names)
    assert [spec.name for spec in registry.known()] == names
    assert registry.spec("mbox") is mbox.MBOX
    assert registry.spec("slack").detect is slack.detect
    assert isinstance(registry.get("slack"), slack.SlackConnector)


@pytest.mark.parametrize(
    ("part", "name"),
    [("slack-export", "slack"), ("mail/team.mbox", "mbox"), ("notes", "markdown")],
)
def test_detection(group: list[EntryPoint], part: str, name: str) -> None:
    assert registry.detect(EXAMPLES / part).name == name


def test_unknown_names_and_paths(group: list[EntryPoint], tmp_path: Path) -> None:
    known = ", ".join(registry.names())
    with pytest.raises(RegistryError) as unknown:
        registry.get("csv")
    assert str(unknown.value) == f"unknown connector 'csv'; known: {known}"
    with pytest.raises(UnknownFormatError, match="no such file"):
        registry.detect(tmp_path / "missing")
    (tmp_path / "data.bin").write_bytes(b"\x00\x01")
    with pytest.raises(UnknownFormatError) as undetected:
        registry.detect(tmp_path / "data.bin")
    assert str(undetected.value).endswith(f"choose one with --format ({known})")
    assert all(name in known for name in BUILT_IN)


def test_a_plugin_class_takes_part_in_detection(group: list[EntryPoint], tmp_path: Path) -> None:
    group.append(EntryPoint("notes", f"{__name__}:Notes", "stratamem.connectors"))
    group.append(EntryPoint("undetectable", f"{__name__}:Undetectable", "stratamem.connectors"))
    group.append(EntryPoint("slack", f"{__name__}:Notes", "stratamem.connectors"))
    path = tmp_path / "today.notes"
    path.write_text("hello")
    assert isinstance(registry.detect(path), Notes)
    spec = registry.spec("notes")
    assert spec.help == "Plain .notes files."
    assert registry.spec("undetectable").detect(path) == 0
    assert isinstance(registry.get("undetectable"), Undetectable)
    assert registry.spec("slack") is slack.CONNECTOR  # a plugin never replaces a built-in


def test_register_in_code(group: list[EntryPoint], tmp_path: Path) -> None:
    registry.register("notes", Notes, Notes.detect, "notes")
    path = tmp_path / "a.notes"
    path.write_text("x")
    assert isinstance(registry.detect(path), Notes)
    assert registry.spec("notes").help == "notes"
