"""A path no reader understands is said to be so: detection looks at what files hold, and an
ingest that reads nothing from a path that holds something says why and exits non-zero."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from stratamem.cli import main
from stratamem.ingest import registry
from stratamem.ingest.connectors import markdown

NAMES = ("ana", "bo", "cy", "dee")


def edn_logs(root: Path, *, files: int = 12, suffix: str = ".txt") -> Path:
    """A chat log archive as some Clojure community loggers keep it: a file per day, an EDN
    map per event."""
    rng = random.Random(5)
    root.mkdir(parents=True)
    for day in range(1, files + 1):
        lines = []
        for n in range(40):
            who = rng.choice(NAMES)
            text = f"message {n} about the {rng.choice(['build', 'deploy', 'repl'])}"
            lines.append(
                f'{{:event/type :message, :ts #inst "2024-02-{day:02d}T10:{n:02d}:00.000-00:00", '
                f':user/name "{who}", :message/text "{text}"}}'
            )
        (root / f"2024-02-{day:02d}{suffix}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def prose_notes(root: Path) -> Path:
    root.mkdir(parents=True)
    for n in range(5):
        (root / f"note-{n}.txt").write_text(
            f"Thoughts {n}\n\nWe met on Tuesday and agreed on the plan.\nThe next step is a"
            " draft.\n\n(An aside, in brackets.)\nMore prose follows here.\n",
            encoding="utf-8",
        )
    return root


def ingest(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "s.db"), "ingest", *args])
    return result.exit_code, result.output


def test_record_lines_in_txt_files_are_not_notes(tmp_path: Path) -> None:
    logs = edn_logs(tmp_path / "logs")
    assert markdown.detect(logs) == 0
    assert markdown.detect(logs / "2024-02-01.txt") == 0
    notes = prose_notes(tmp_path / "notes")
    assert markdown.detect(notes) == 60
    assert markdown.detect(notes / "note-0.txt") == 20


def test_a_folder_of_unknown_logs_is_refused_not_read_as_notes(tmp_path: Path) -> None:
    logs = edn_logs(tmp_path / "logs")
    with pytest.raises(Exception, match="no connector recognises"):
        registry.detect(logs)
    code, output = ingest(tmp_path, "--quiet", str(logs))
    assert code == 1
    assert "no connector recognises this path" in output
    assert "chunks" not in output


@pytest.mark.parametrize("suffix", [".txt", ".edn"])
def test_a_named_format_that_reads_nothing_says_why_and_exits_non_zero(
    suffix: str, tmp_path: Path
) -> None:
    logs = edn_logs(tmp_path / "logs", suffix=suffix)
    code, output = ingest(tmp_path, "--quiet", "--format", "jsonl", str(logs))
    assert code == 1
    assert "nothing was read" in output
    assert "the jsonl reader found nothing it reads in this folder" in output
    assert f"12 {suffix} files" in output
    assert "--allow-empty" in output


def test_allow_empty_accepts_it_and_json_says_it(tmp_path: Path) -> None:
    logs = edn_logs(tmp_path / "logs")
    code, output = ingest(tmp_path, "--json", "--allow-empty", "--format", "jsonl", str(logs))
    assert code == 0, output
    report = json.loads(output)
    assert report["read_nothing"] is True
    assert report["records"] == 0
    assert "nothing was read" in report["warnings"][0]


def test_slack_on_something_else_says_it_is_no_slack_export(tmp_path: Path) -> None:
    logs = edn_logs(tmp_path / "logs")
    code, output = ingest(tmp_path, "--quiet", "--format", "slack", str(logs))
    assert code == 1
    assert "not a Slack export" in output
    assert "users.json" not in output.replace("(general/2024-03-01.json)", "")


def test_a_reader_that_skips_every_item_names_the_first_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n[1, 2\n", encoding="utf-8")
    code, output = ingest(tmp_path, "--quiet", str(bad))
    assert code == 1
    assert "every item was skipped (2 problems; the first:" in output


def test_reading_something_is_not_a_warning(tmp_path: Path) -> None:
    notes = prose_notes(tmp_path / "notes")
    code, output = ingest(tmp_path, "--json", str(notes))
    assert code == 0, output
    report = json.loads(output)
    assert (report["read_nothing"], report["warnings"]) == (False, [])
    # Read again, nothing changes, and that is no warning either.
    code, output = ingest(tmp_path, "--json", str(notes))
    assert code == 0
    assert json.loads(output)["warnings"] == []


def test_an_empty_folder_named_as_a_format_is_no_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, output = ingest(tmp_path, "--json", "--format", "jsonl", str(tmp_path / "empty"))
    assert code == 0, output
    assert json.loads(output)["read_nothing"] is False
