"""The one exception tree: drawn in errors.py's docstring, defined there, importable where its
classes are used."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import stratamem
from stratamem import errors
from stratamem.errors import StratamemError


def drawn_tree() -> dict[str, set[str | None]]:
    """Each class of the docstring's drawing → its parents (None for the root); a class with
    two parents is drawn under each."""
    lines = (errors.__doc__ or "").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("StratamemError"))
    root_column = lines[start].index("StratamemError")
    parents: dict[str, set[str | None]] = {}
    path: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        match = re.search(r"[A-Z]\w+", line)
        assert match, line
        depth, rest = divmod(match.start() - root_column, 4)
        assert rest == 0, f"misaligned: {line!r}"
        del path[depth:]
        parents.setdefault(match.group(), set()).add(path[-1] if path else None)
        path.append(match.group())
    return parents


def defined_tree() -> dict[str, set[str | None]]:
    """Each class under StratamemError defined in errors.py → its parents."""
    parents: dict[str, set[str | None]] = {"StratamemError": {None}}

    def walk(cls: type[StratamemError]) -> None:
        for sub in cls.__subclasses__():
            if sub.__module__ == errors.__name__:
                parents.setdefault(sub.__name__, set()).add(cls.__name__)
                walk(sub)

    walk(StratamemError)
    return parents


def test_the_docstring_draws_the_tree_the_code_defines() -> None:
    assert drawn_tree() == defined_tree()


def test_every_exception_class_of_errors_py_is_in_the_tree() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException)
    }
    assert defined == set(defined_tree())


def public_exceptions() -> list[tuple[str, type[BaseException]]]:
    """Every public exception class defined in a module of the package."""
    found = []
    for module_info in pkgutil.walk_packages(stratamem.__path__, "stratamem."):
        if module_info.name.endswith("__main__"):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found.append((module.__name__, value))
    return found


def test_no_module_but_errors_py_defines_a_public_exception() -> None:
    elsewhere = [
        f"{module}.{cls.__name__}"
        for module, cls in public_exceptions()
        if module != "stratamem.errors"
    ]
    assert elsewhere == []


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("stratamem.embed.base", "EmbeddingError"),
        ("stratamem.embed.base", "MissingDependencyError"),
        ("stratamem.embed.base", "ModelFileError"),
        ("stratamem.embed.base", "EmbeddingServerError"),
        ("stratamem.embed", "EmbeddingError"),
        ("stratamem.embed", "EmbeddingServerError"),
        ("stratamem.embed", "MissingDependencyError"),
        ("stratamem.embed", "ModelFileError"),
        ("stratamem.embed.indexing", "ModelMismatchError"),
        ("stratamem.retrieval.rerank", "RerankError"),
        ("stratamem.remote", "RequestFailed"),
        ("stratamem.retrieval.index.file", "Rejected"),
        ("stratamem.store.trees", "SealRaced"),
        ("stratamem.memory.decide", "SkipDecision"),
    ],
)
def test_the_old_import_locations_still_work(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_errors_carry_their_context() -> None:
    failed = errors.RequestFailed("HTTP 503: busy", status=503, detail="busy", retry=True)
    assert (str(failed), failed.status, failed.detail, failed.retry, failed.delay) == (
        "HTTP 503: busy",
        503,
        "busy",
        True,
        None,
    )
    server = errors.EmbeddingServerError("http://h/v1/embeddings", 401, "bad key")
    assert str(server) == "http://h/v1/embeddings (HTTP 401): bad key"
    assert str(errors.EmbeddingServerError("http://h", None, "down")) == "http://h: down"
    assert str(errors.ModelFileError("/m/model.onnx", "checksum")) == "/m/model.onnx: checksum"
    missing = errors.MissingDependencyError("no torch", "pip install 'stratamem[x]'")
    assert missing.install == "pip install 'stratamem[x]'"
    assert str(missing) == "no torch; install it with: pip install 'stratamem[x]'"
    extra = errors.MissingExtraError("stratamem serve", extra="server")
    assert (extra.extra, extra.install) == ("server", "pip install 'stratamem[server]'")
    assert str(extra) == "stratamem serve needs the 'server' extra: pip install 'stratamem[server]'"
    assert str(errors.SourceFormatError("a.json", "line 3", "bad")) == "a.json:line 3: bad"
    assert str(errors.SourceFormatError("a.json", "", "bad")) == "a.json: bad"
