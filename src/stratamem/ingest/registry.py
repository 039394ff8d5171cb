"""Name → connector registry, with detection from the path.

The names are entries of :data:`stratamem.plugins.CONNECTORS`, each a factory of a
:class:`~stratamem.ingest.model.Connector`. A built-in connector module names its own
:class:`ConnectorSpec` (the factory, a ``detect(path) -> int`` function that returns a
confidence, 0 = not mine, and a line of help) and is imported only when a connector is asked
for by name or a path's connector is detected. ``--format NAME`` bypasses detection. Third-party
connectors register through the ``stratamem.connectors`` entry-point group (see
``docs/plugins.md``): the entry point's object is a :class:`ConnectorSpec` or a connector
class, whose optional ``detect`` attribute takes part in detection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stratamem import plugins
from stratamem.errors import UnknownFormatError
from stratamem.ingest.model import Connector
from stratamem.plugins import Registry

Detector = Callable[[Path], int]
ConnectorFactory = Callable[[], Connector]

CONNECTORS: Registry[ConnectorFactory] = plugins.CONNECTORS


@dataclass(frozen=True, slots=True)
class ConnectorSpec:
    """A connector's registry entry: calling it makes the connector."""

    name: str
    factory: ConnectorFactory
    detect: Detector
    help: str

    def __call__(self) -> Connector:
        return self.factory()


def register(name: str, factory: ConnectorFactory, detect: Detector, help: str) -> None:
    """Make ``factory()`` the connector ``name``, detected by ``detect``."""
    CONNECTORS.register(name, ConnectorSpec(name, factory, detect, help))


def names() -> list[str]:
    """The connector names, sorted, without importing any connector."""
    return CONNECTORS.known()


def spec(name: str) -> ConnectorSpec:
    """The registry entry of ``name``; a connector class given as a plugin gets a spec made of
    its ``detect`` attribute (0 for every path when it has none) and its docstring's first
    line."""
    factory = CONNECTORS.load(name)
    if isinstance(factory, ConnectorSpec):
        return factory
    detect: Detector = getattr(factory, "detect", _never)
    doc = (factory.__doc__ or "").strip()
    return ConnectorSpec(name, factory, detect, doc.splitlines()[0] if doc else "")


def known() -> list[ConnectorSpec]:
    """Every connector's entry, sorted by name (imports them all)."""
    return [spec(name) for name in names()]


def get(name: str) -> Connector:
    """A new connector of the given name."""
    return CONNECTORS.create(name)


def detect(path: Path) -> Connector:
    """The connector most confident that ``path`` is its format; ties go to the first name."""
    every = names()
    detectors = [spec(name).detect for name in every]
    if not path.exists():
        raise UnknownFormatError(f"{path}: no such file or directory")
    scored = sorted(
        ((found(path), name) for found, name in zip(detectors, every, strict=True)),
        key=lambda pair: (-pair[0], pair[1]),
    )
    if not scored or scored[0][0] <= 0:
        raise UnknownFormatError(
            f"{path}: no connector recognises this path; choose one with --format "
            f"({', '.join(every)})"
        )
    return CONNECTORS.create(scored[0][1])


def _never(path: Path) -> int:
    return 0
