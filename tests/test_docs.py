"""The docs' examples run: every code block of README.md and docs/*.md marked runnable (the
marker and its options: tests/doc_examples.py, CONTRIBUTING.md), against a store built from
the example workspace as ``make run`` builds it.

Each block (or chain of blocks marked ``continue``) runs in a folder of its own that holds a
copy of that store, ``agent.db`` (also ``STRATAMEM_DB``), and of ``examples/workspace``, with
``HOME`` and the XDG folders inside it, the hashing embedder configured and ingest not
embedding (as the other CLI tests run it), so that no block loads the bundled model. Python
blocks are executed in this process, in a namespace of their own. A shell block's commands run
in this process through click's runner in every tier, and in the ``all`` tier each also as a
real ``bash -c`` with ``stratamem`` on the ``PATH``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

import stratamem
from doc_examples import (
    LANGUAGES,
    PYTHON,
    ROOT,
    SHELL,
    Block,
    Command,
    MarkerError,
    collect,
    missing_lines,
    parse_options,
    read_doc,
    strip_comment,
)
from stratamem.cli import main
from suite import PATIENCE_S

# How many blocks the docs mark: removing markers makes this test fail, adding them does not.
MIN_MARKED = 18
STORE = "agent.db"
# The environment variables of the host that a block does not see (the index folder of the
# test run stays, so that nothing lands in the user's cache).
KEPT = ("STRATAMEM_INDEX_DIR",)

BLOCKS, PROBLEMS = collect()


def make_run_ingests() -> list[Command]:
    """The ingests of the Makefile's ``run`` target, as commands."""
    makefile = (ROOT / "Makefile").read_text()
    target = re.search(r"^run:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert target, "the Makefile has no run target"
    lines = [line.strip() for line in target.group(1).splitlines()]
    ingests = [line.replace("$(SM)", "stratamem", 1) for line in lines if "ingest" in line]
    assert ingests, "the Makefile's run target ingests nothing"
    return [Command(line) for line in ingests]


def environment(folder: Path) -> dict[str, str]:
    """What a block's commands see of the environment, beside the host's own."""
    home = folder / "home"
    return {
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "STRATAMEM_DB": str(folder / STORE),
        "STRATAMEM_EMBED_MODEL": "hashing",
        "STRATAMEM_INGEST_EMBED": "off",
        "STRATAMEM_DEBUG": "1",
        "COLUMNS": "200",
    }


def _unset() -> dict[str, str | None]:
    return {name: None for name in os.environ if name.startswith("STRATAMEM_") and name not in KEPT}


@dataclass
class Chain:
    """A block, and the blocks that continue it: one folder, one Python namespace."""

    folder: Path
    namespace: dict[str, object] = field(default_factory=lambda: {"__name__": "__main__"})
    done: dict[str, Exception | None] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.folder / "home"


class Examples:
    """Runs marked blocks against copies of the example store, built once."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self._tmp = tmp
        self._chains: dict[tuple[str, bool], Chain] = {}
        self._bin = tmp.mktemp("docs-bin")
        shim = self._bin / "stratamem"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m stratamem "$@"\n')
        shim.chmod(0o755)
        self._template = tmp.mktemp("docs-store")
        shutil.copytree(ROOT / "examples" / "workspace", self._template / "examples" / "workspace")
        builder = Chain(self._template)
        for command in make_run_ingests():
            self._check(command, "the Makefile's run target", *self._in_process(command, builder))

    def close(self) -> None:
        for chain in self._chains.values():
            for value in chain.namespace.values():
                if isinstance(value, stratamem.Memory):
                    value.close()

    def run(self, block: Block, *, shell: bool) -> None:
        """Run ``block``, after the blocks of its chain before it that have not run yet."""
        chain = self._chain(block.chain, shell)
        members = [b for b in BLOCKS if b.chain == block.chain]
        for earlier in members[: members.index(block) + 1]:
            if earlier.id in chain.done:
                failed = chain.done[earlier.id]
                if failed is not None and earlier is not block:
                    _continues_a_failure(earlier, failed)
                continue
            try:
                self._execute(earlier, chain, shell=shell)
            except Exception as error:
                chain.done[earlier.id] = error
                if earlier is block:
                    raise
                _continues_a_failure(earlier, error)
            chain.done[earlier.id] = None
        failed = chain.done[block.id]
        if failed is not None:
            raise failed

    def _chain(self, key: str, shell: bool) -> Chain:
        if (key, shell) not in self._chains:
            folder = self._tmp.mktemp("docs-example")
            shutil.copytree(self._template, folder, dirs_exist_ok=True)
            self._chains[key, shell] = Chain(folder)
        return self._chains[key, shell]

    def _execute(self, block: Block, chain: Chain, *, shell: bool) -> None:
        for name, text in block.options.files:
            (chain.folder / name).write_text(text + "\n")
        env = dict(block.options.env)
        if block.language in PYTHON:
            self._python(block, chain, env)
            return
        for command in block.commands():
            if shell:
                code, output = self._in_bash(command, chain, env)
            else:
                code, output = self._in_process(command, chain, env)
            self._check(command, block.id, code, output)

    def _python(self, block: Block, chain: Chain, env: dict[str, str]) -> None:
        # Padded so that a traceback names the doc's own lines.
        code = compile("\n" * block.line + block.text, str(ROOT / block.doc), "exec")
        with pytest.MonkeyPatch.context() as patch, contextlib.chdir(chain.folder):
            for name in _unset():
                patch.delenv(name)
            for name, value in {**environment(chain.folder), **env}.items():
                patch.setenv(name, value)
            exec(code, chain.namespace)

    def _in_process(
        self, command: Command, chain: Chain, env: dict[str, str] | None = None
    ) -> tuple[int, str]:
        assignments, args = command.argv(chain.home)
        variables = {**_unset(), **environment(chain.folder), **(env or {}), **assignments}
        with contextlib.chdir(chain.folder):
            result = CliRunner().invoke(main, args, env=variables, catch_exceptions=True)
        output = result.output
        error = result.exception
        if result.exc_info is not None and error is not None and not isinstance(error, SystemExit):
            output += "".join(traceback.format_exception(*result.exc_info))
        return result.exit_code, output

    def _in_bash(self, command: Command, chain: Chain, env: dict[str, str]) -> tuple[int, str]:
        variables = {k: v for k, v in os.environ.items() if k not in _unset()}
        variables.update(environment(chain.folder))
        variables.update(env)
        variables["PATH"] = f"{self._bin}{os.pathsep}{os.environ.get('PATH', '')}"
        # The code this test imports, whatever the host's PYTHONPATH says.
        source = str(Path(stratamem.__file__).resolve().parents[1])
        variables["PYTHONPATH"] = os.pathsep.join(
            p for p in (source, os.environ.get("PYTHONPATH")) if p
        )
        done = subprocess.run(
            ["bash", "-c", command.text],
            cwd=chain.folder,
            env=variables,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PATIENCE_S,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr

    @staticmethod
    def _check(command: Command, where: str, code: int, output: str) -> None:
        if code != 0:
            raise AssertionError(f"{where}: `{command.text}` exited {code}:\n{output}")
        missing = missing_lines(command.expected, output)
        if missing:
            shown = "\n  ".join(missing)
            raise AssertionError(
                f"{where}: `{command.text}` did not print:\n  {shown}\nit printed:\n{output}"
            )


def _continues_a_failure(earlier: Block, error: Exception) -> None:
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    pytest.fail(f"{earlier.id}, which this block continues, failed: {first}", pytrace=False)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Examples]:
    runner = Examples(tmp_path_factory)
    yield runner
    runner.close()


def _param(block: Block) -> object:
    return pytest.param(block, id=block.id, marks=[pytest.mark.slow] if block.options.slow else [])


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_example_runs(block: Block, examples: Examples) -> None:
    examples.run(block, shell=False)


@pytest.mark.slow
@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in BLOCKS if b.language in SHELL])
def test_example_runs_in_a_shell(block: Block, examples: Examples) -> None:
    examples.run(block, shell=True)


def test_markers_are_well_formed() -> None:
    assert not PROBLEMS, "\n".join(PROBLEMS)


def test_marked_blocks_are_in_languages_the_runner_knows() -> None:
    unknown = [f"{b.id}: {b.language or '(none)'}" for b in BLOCKS if b.language not in LANGUAGES]
    assert not unknown, f"no runner for these blocks' languages (known: {LANGUAGES}): {unknown}"


def test_marked_blocks_can_be_read() -> None:
    """Every command of a marked shell block is one the runner runs, every Python block
    compiles."""
    wrong = []
    for block in BLOCKS:
        try:
            if block.language in SHELL:
                assert block.commands(), f"{block.id}: no command"
            elif block.language in PYTHON:
                compile(block.text, block.id, "exec")
        except (MarkerError, SyntaxError, AssertionError) as error:
            wrong.append(str(error))
    assert not wrong, "\n".join(wrong)


def test_docs_mark_their_examples() -> None:
    counts = Counter(block.doc for block in BLOCKS)
    print(f"{len(BLOCKS)} runnable blocks:", dict(sorted(counts.items())))
    assert len(BLOCKS) >= MIN_MARKED, (
        f"{len(BLOCKS)} blocks are marked runnable, {MIN_MARKED} were: {dict(counts)}"
    )


# -- the markers, read ----------------------------------------------------------------------


def test_a_marker_names_the_block_after_it() -> None:
    doc = (
        "text\n<!-- runnable: continue-me -->\n```sh\nstratamem sources\n```\n"
        "<!-- runnable -->\n```sh\nstratamem stats  # counts\n```\n"
        "<!-- runnable: slow env:A=1 file:x.pass='a b' NODE=n1 -->\n```console\n"
        "$ stratamem show NODE\nn1 … done\n```\n"
        "<!-- runnable: continue -->\n```python\nprint(1)\n```\n"
        "```markdown\n<!-- runnable -->\n```\n"
    )
    blocks, problems = read_doc("x.md", doc)
    assert problems == ["x.md:3: unknown marker option 'continue-me'"]
    assert [(b.line, b.language, b.chain) for b in blocks] == [
        (7, "sh", "x.md:7"),
        (11, "console", "x.md:11"),
        (16, "python", "x.md:11"),
    ]
    assert blocks[0].commands() == [Command("stratamem stats")]
    console = blocks[1]
    assert console.options.slow
    assert console.options.env == (("A", "1"),)
    assert console.options.files == (("x.pass", "a b"),)
    assert console.commands() == [Command("stratamem show n1", ("n1 … done",))]


def test_replacements_are_made_at_once_longest_first() -> None:
    options = parse_options("A=B B=C AB=x {R}={root}/y", "x.md:1")
    block = Block("x.md", 1, "sh", "A B AB {R}\n", options)
    assert block.text == f"B C x {ROOT}/y\n"


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ("<!-- runnable -->\ntext\n", "x.md:1: the marker is not right before a code block"),
        ("<!-- runnable -->\n", "x.md:1: the marker is not right before a code block"),
        ("<!-- runnable: continue -->\n```sh\n```\n", "x.md:2: continues, but no marked"),
        ("<!-- runnable: A=B -->\n```sh\nstratamem\n```\n", "x.md:2: the marker replaces 'A'"),
        ("<!-- runnable: file:../x=1 -->\n```sh\n```\n", "x.md:2: 'file:../x=1' is not"),
        ("<!-- runnable: env:1=1 -->\n```sh\n```\n", "x.md:2: 'env:1=1' is not env:NAME"),
        ("<!-- runnable -- >\n```sh\n```\n", "x.md:1: cannot read the marker"),
        ("<!-- runnable -->\n```sh\nstratamem\n", "x.md:2: the code block is never closed"),
    ],
)
def test_a_marker_that_cannot_be_taken_is_a_problem(doc: str, problem: str) -> None:
    _, problems = read_doc("x.md", doc)
    assert len(problems) == 1, problems
    assert problems[0].startswith(problem), problems


@pytest.mark.parametrize(
    "command",
    [
        "pip install .",
        "stratamem search x | head",
        "TOKEN=$(stratamem principal add x --scopes team)",
        'stratamem search "$Q"',
        "stratamem sources > out.txt",
        "stratamem sources && stratamem stats",
        "curl -s http://127.0.0.1:8765/v1/sources",
    ],
)
def test_a_command_the_runner_cannot_run_is_refused(command: str) -> None:
    block = Block("x.md", 1, "sh", command + "\n")
    with pytest.raises(MarkerError, match=r"x\.md:1: "):
        block.commands()


def test_commands_read_as_a_shell_reads_them(tmp_path: Path) -> None:
    block = Block(
        "x.md",
        1,
        "sh",
        "# a comment\nSTRATAMEM_AS=pager stratamem brief \\\n  --since 24h   # the last day\n"
        "stratamem forget slack:#random 'a # b'\nstratamem ingest ~/notes\n",
    )
    commands = block.commands()
    assert [c.argv(tmp_path) for c in commands] == [
        ({"STRATAMEM_AS": "pager"}, ["brief", "--since", "24h"]),
        ({}, ["forget", "slack:#random", "a # b"]),
        ({}, ["ingest", f"{tmp_path}/notes"]),
    ]
    assert strip_comment("a 'b # c' # d") == "a 'b # c' "


def test_shown_output_is_found_line_by_line() -> None:
    output = "subject   predicate  object\nperson:carol diaz  leads  release  (fact_8bd5)\n"
    assert missing_lines(("person:carol diaz leads release (fact_…)", "…"), output) == []
    assert missing_lines(("subject predicate object",), output) == []
    # Each line is found within one line of the output, its parts in their order.
    assert missing_lines(("object person:carol",), output) == ["object person:carol"]
    assert missing_lines(("release … leads",), output) == ["release … leads"]
