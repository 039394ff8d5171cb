"""Name → connector registry, with detection from the path.

Each connector registers a factory and a ``detect(path) -> int`` function that returns a
confidence (0 = not mine). ``--kind NAME`` bypasses detection. Third-party connectors register
through the ``stratamem.connectors`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from stratamem.errors import RegistryError, UnknownFormatError
from stratamem.ingest.model import Connector

Detector = Callable[[Path], int]


@dataclass(frozen=True, slots=True)
class ConnectorSpec:
    name: str
    factory: Callable[[], Connector]
    detect: Detector
    help: str


_REGISTRY: dict[str, ConnectorSpec] = {}
_loaded = False


def register(name: str, factory: Callable[[], Connector], detect: Detector, help: str) -> None:
    _REGISTRY[name] = ConnectorSpec(name, factory, detect, help)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from stratamem.ingest import connectors  # noqa: F401  (registers the built-in ones)

    for ep in entry_points(group="stratamem.connectors"):
        ep.load()


def known() -> list[ConnectorSpec]:
    _load()
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def get(name: str) -> Connector:
    _load()
    try:
        return _REGISTRY[name].factory()
    except KeyError:
        names = ", ".join(sorted(_REGISTRY))
        raise RegistryError(f"unknown connector {name!r}; known: {names}") from None


def detect(path: Path) -> Connector:
    """The connector most confident that ``path`` is its format."""
    _load()
    if not path.exists():
        raise UnknownFormatError(f"{path}: no such file or directory")
    scored = sorted(
        ((spec.detect(path), spec.name) for spec in _REGISTRY.values()),
        key=lambda pair: (-pair[0], pair[1]),
    )
    if not scored or scored[0][0] <= 0:
        names = ", ".join(sorted(_REGISTRY))
        raise UnknownFormatError(
            f"{path}: no connector recognises this path; choose one with --kind ({names})"
        )
    return _REGISTRY[scored[0][1]].factory()
