"""Every door takes an operation's parameters under the operation's names: the Python method
it names, and the CLI command it names (its spelling there: kebab case, a list's option
repeated, or a positional argument of the parameter's name)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import stratamem
from stratamem.cli import main
from stratamem.cli.operations import option_name
from stratamem.ops import OPERATIONS, Operation

# What a door takes in another shape, each with why.
PYTHON_SHAPES = {
    # The JSON answer's options: Python returns the objects themselves.
    ("search", "explain"): "every hit carries its breakdown in Python",
    ("recall", "explain"): "every hit carries its raw signals in Python",
}
CLI_SHAPES = {
    # A secret typed on a command line lands in the shell's history and in `ps`.
    ("lock", "passphrase"): "--passphrase-file, the environment, the keyring or a prompt",
    ("unlock", "passphrase"): "--passphrase-file, the environment, the keyring or a prompt",
}


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stratamem.Memory]:
    path = tmp_path_factory.mktemp("doors") / "doors.db"
    with stratamem.open(path, embedder=None) as opened:
        yield opened


def _python_method(memory: stratamem.Memory, op: Operation) -> inspect.Signature:
    assert op.python, f"{op.name} names its Python method"
    target: object = memory
    for part in op.python.split("."):
        target = getattr(target, part)
    assert callable(target), op.python
    return inspect.signature(target)


@pytest.mark.parametrize("op", OPERATIONS.values(), ids=lambda op: op.name)
def test_the_python_method_takes_the_same_names(memory: stratamem.Memory, op: Operation) -> None:
    taken = _python_method(memory, op).parameters
    for param in op.params:
        if (op.name, param.name) in PYTHON_SHAPES:
            continue
        assert param.name in taken, f"mem.{op.python}() takes no {param.name!r}"


def _command(op: Operation) -> click.Command:
    command: click.Command = main
    for part in (op.cli or op.name.replace("_", "-")).split():
        assert isinstance(command, click.Group)
        command = command.commands[part]
    return command


@pytest.mark.parametrize("op", OPERATIONS.values(), ids=lambda op: op.name)
def test_the_cli_command_takes_the_same_names(op: Operation) -> None:
    command = _command(op)
    arguments = {p.name for p in command.params if isinstance(p, click.Argument)}
    options = {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts} | {
        opt for p in command.params if isinstance(p, click.Option) for opt in p.secondary_opts
    }
    for param in op.params:
        if param.name in arguments or (op.name, param.name) in CLI_SHAPES:
            continue
        flag = option_name(param)
        if param.type == "bool":
            assert flag in options or f"--no-{flag[2:]}" in options, (
                f"stratamem {op.cli} takes no {flag}"
            )
            continue
        assert flag in options, f"stratamem {op.cli} takes no {flag}"


def test_the_cli_help_shows_the_json_option_on_every_operation_command() -> None:
    for op in OPERATIONS.values():
        names = {o for p in _command(op).params if isinstance(p, click.Option) for o in p.opts}
        if op.access == "read" or op.cli is None:
            assert "--json" in names, f"stratamem {op.cli or op.name} --json"


def test_no_door_file_restates_a_limit_the_table_declares() -> None:
    """The servers carry no argument declarations of their own."""
    server = Path(stratamem.__file__).parent / "server"
    for path in server.glob("*.py"):
        text = path.read_text()
        assert "Field(" not in text, path.name
        assert "BaseModel" not in text, path.name
