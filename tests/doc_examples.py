"""The code blocks of README.md and docs/*.md marked runnable: finding them and reading them.

A block is marked by an HTML comment that ends on the line right before its opening fence
(GitHub does not render it)::

    <!-- runnable -->
    <!-- runnable: continue env:STRATAMEM_PASSPHRASE=x NODE_ID=0123abcd -->
    <!-- runnable:
      ~/notes=examples/workspace/notes
      NODE_ID=0123abcd
    -->

The options, separated by spaces and quoted as in a shell:

- ``continue``: run in the folder (and, for Python, the namespace) of the file's previous
  marked block, after it;
- ``slow``: run only in the ``all`` tier;
- ``env:NAME=VALUE``: set an environment variable for the block's commands;
- ``file:NAME=TEXT``: write ``TEXT`` and a newline to the file ``NAME`` of the block's folder
  first (a passphrase file, say);
- ``OLD=NEW``: run the block with ``OLD`` replaced by ``NEW`` (a path on the reader's machine by
  one of the example workspace, a placeholder by a real id); ``{root}`` in ``NEW`` is the
  repository's root.

Languages: ``python`` runs whole; ``sh``, ``bash`` and ``shell`` run each command, a line
(``\\`` continues it) that is not a comment; ``console`` runs each line that starts with
``$ `` and checks that every line shown after it appears in what it printed (``…`` stands for
anything; a line of ``…`` alone shows nothing). A command is ``stratamem`` and its arguments,
optionally after ``NAME=VALUE`` assignments: no pipes, redirections, substitutions or variables.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The languages the runner knows, by what it does with them.
PYTHON = ("python",)
SHELL = ("sh", "bash", "shell", "console")
LANGUAGES = PYTHON + SHELL

_OPENING = re.compile(r"^\s*<!--\s*runnable\b")
_MARKER = re.compile(r"^\s*<!--\s*runnable(?::(?P<options>.*?))?\s*-->\s*$")
_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = set("|;&<>()")
_ELLIPSIS = re.compile(r"…|\.\.\.")


class MarkerError(ValueError):
    """A marker or a marked block the runner cannot take, with the place."""


@dataclass(frozen=True, slots=True)
class Options:
    continues: bool = False
    slow: bool = False
    env: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    replace: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Command:
    """One command of a shell block: its text as a shell reads it, and the output lines the
    doc shows after it (``console`` blocks)."""

    text: str
    expected: tuple[str, ...] = ()

    def argv(self, home: Path) -> tuple[dict[str, str], list[str]]:
        """The environment assignments and the arguments after ``stratamem``, as the shell
        would pass them (``~`` at the start of a word is ``home``)."""
        words = [_expand_home(word, home) for word in shlex.split(self.text)]
        env: dict[str, str] = {}
        while words and _ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        return env, words[1:]


@dataclass(frozen=True, slots=True)
class Block:
    doc: str  # relative to the repository's root
    line: int  # the opening fence's, from 1
    language: str
    source: str  # as the doc has it
    options: Options = field(default_factory=Options)
    chain: str = ""  # the id of the first block of its ``continue`` chain

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def text(self) -> str:
        """The block's code, with the marker's replacements made (all at once: one's new text
        is not searched for another's old)."""
        if not self.options.replace:
            return self.source
        new = {old: value.replace("{root}", str(ROOT)) for old, value in self.options.replace}
        olds = re.compile("|".join(re.escape(old) for old, _ in self.options.replace))
        return olds.sub(lambda found: new[found.group()], self.source)

    def commands(self) -> list[Command]:
        """The commands of a shell block, each checked to be one the runner can run."""
        if self.language == "console":
            commands = _console_commands(self.text, self.id)
        else:
            commands = [Command(text) for text in _shell_commands(self.text)]
        for command in commands:
            _check_command(command.text, self.id)
        return commands


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def collect(root: Path = ROOT) -> tuple[list[Block], list[str]]:
    """Every marked block of the docs, in file order, and every problem with a marker."""
    blocks: list[Block] = []
    problems: list[str] = []
    for path in doc_files(root):
        found, wrong = read_doc(path.relative_to(root).as_posix(), path.read_text())
        blocks += found
        problems += wrong
    return blocks, problems


def read_doc(doc: str, text: str) -> tuple[list[Block], list[str]]:
    """The marked blocks of one Markdown file, and the problems with its markers."""
    lines = text.split("\n")
    blocks: list[Block] = []
    problems: list[str] = []
    pending: tuple[int, str] | None = None  # a marker's line and its options
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            end = _closing_fence(lines, i, fence.group("fence"))
            if end is None:
                problems.append(f"{doc}:{i + 1}: the code block is never closed")
                return blocks, problems
            if pending is not None:
                try:
                    blocks.append(_block(doc, i + 1, fence, lines[i + 1 : end], pending, blocks))
                except MarkerError as error:
                    problems.append(str(error))
                pending = None
            i = end + 1
            continue
        if pending is not None:
            problems.append(f"{doc}:{pending[0]}: the marker is not right before a code block")
            pending = None
        if _OPENING.match(line):
            # A marker may run over several lines, up to its ``-->``.
            end = next((j for j in range(i, len(lines)) if "-->" in lines[j]), len(lines) - 1)
            text = " ".join(part.strip() for part in lines[i : end + 1])
            marker = _MARKER.match(text)
            if marker is None:
                problems.append(f"{doc}:{i + 1}: cannot read the marker {text!r}")
            else:
                pending = (i + 1, marker.group("options") or "")
            i = end
        i += 1
    if pending is not None:
        problems.append(f"{doc}:{pending[0]}: the marker is not right before a code block")
    return blocks, problems


def _closing_fence(lines: list[str], start: int, fence: str) -> int | None:
    for j in range(start + 1, len(lines)):
        stripped = lines[j].strip()
        if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
            return j
    return None


def _block(
    doc: str,
    line: int,
    fence: re.Match[str],
    body: list[str],
    marker: tuple[int, str],
    earlier: list[Block],
) -> Block:
    where = f"{doc}:{line}"
    words = fence.group("info").split()
    language = words[0].lower() if words else ""
    options = parse_options(marker[1], where)
    chain = where
    if options.continues:
        before = [b for b in earlier if b.doc == doc]
        if not before:
            raise MarkerError(f"{where}: continues, but no marked block comes before it")
        chain = before[-1].chain
    source = "\n".join(body) + "\n"
    for old, _ in options.replace:
        if old not in source:
            raise MarkerError(
                f"{where}: the marker replaces {old!r}, which the block does not hold"
            )
    return Block(doc, line, language, source, options, chain)


def parse_options(text: str, where: str) -> Options:
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise MarkerError(f"{where}: cannot read the marker's options: {error}") from None
    continues = slow = False
    env: list[tuple[str, str]] = []
    files: list[tuple[str, str]] = []
    replace: list[tuple[str, str]] = []
    for word in words:
        if word == "continue":
            continues = True
        elif word == "slow":
            slow = True
        elif word.startswith("env:"):
            name, eq, value = word[4:].partition("=")
            if not eq or not _NAME.match(name):
                raise MarkerError(f"{where}: {word!r} is not env:NAME=VALUE")
            env.append((name, value))
        elif word.startswith("file:"):
            name, eq, value = word[5:].partition("=")
            if not eq or not name or "/" in name or name in (".", ".."):
                raise MarkerError(f"{where}: {word!r} is not file:NAME=TEXT, NAME a plain name")
            files.append((name, value))
        elif "=" in word and not word.startswith("="):
            old, _, new = word.partition("=")
            replace.append((old, new))
        else:
            raise MarkerError(f"{where}: unknown marker option {word!r}")
    # Longest first: a placeholder inside another is replaced after it.
    replace.sort(key=lambda pair: -len(pair[0]))
    return Options(continues, slow, tuple(env), tuple(files), tuple(replace))


def _logical_lines(text: str) -> list[str]:
    """The lines of a shell block, those ending in ``\\`` joined to the next."""
    joined: list[str] = []
    carry = ""
    for line in text.split("\n"):
        if line.endswith("\\"):
            carry += line[:-1] + " "
            continue
        joined.append(carry + line)
        carry = ""
    if carry:
        joined.append(carry)
    return joined


def _shell_commands(text: str) -> list[str]:
    commands = []
    for line in _logical_lines(text):
        command = strip_comment(line).strip()
        if command:
            commands.append(command)
    return commands


def _console_commands(text: str, where: str) -> list[Command]:
    commands: list[tuple[str, list[str]]] = []
    for line in _logical_lines(text):
        if line.startswith("$ "):
            commands.append((strip_comment(line[2:]).strip(), []))
        elif line.strip():
            if not commands:
                raise MarkerError(f"{where}: {line.strip()!r} comes before any `$ ` line")
            commands[-1][1].append(line.strip())
    return [Command(text, tuple(expected)) for text, expected in commands]


def strip_comment(line: str) -> str:
    """``line`` without its shell comment: from an unquoted ``#`` that starts a word."""
    quote = ""
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _check_command(text: str, where: str) -> None:
    quote = ""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote == "'":
            if char == "'":
                quote = ""
        elif char in "$`":
            raise MarkerError(f"{where}: `{text}` uses the shell ({char}), which the runner lacks")
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in _OPERATORS:
            raise MarkerError(f"{where}: `{text}` uses the shell ({char}), which the runner lacks")
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise MarkerError(f"{where}: cannot read `{text}`: {error}") from None
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    if not words or words[0] != "stratamem":
        raise MarkerError(f"{where}: `{text}` is not a stratamem command")


def _expand_home(word: str, home: Path) -> str:
    if word == "~" or word.startswith("~/"):
        return str(home) + word[1:]
    return word


def missing_lines(expected: tuple[str, ...], output: str) -> list[str]:
    """The lines of ``expected`` that no line of ``output`` shows: runs of spaces count as
    one, and ``…`` (or ``...``) stands for anything."""
    shown = [" ".join(line.split()) for line in output.splitlines()]
    missing = []
    for line in expected:
        parts = [" ".join(part.split()) for part in _ELLIPSIS.split(line)]
        parts = [part for part in parts if part]
        if parts and not any(_in_order(parts, out) for out in shown):
            missing.append(line)
    return missing


def _in_order(parts: list[str], line: str) -> bool:
    at = 0
    for part in parts:
        found = line.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True
