"""Name → plugin registries: one mechanism for every pluggable part, and the list of them.

=============  =========================  =====================================================
registry       entry-point group          a plugin is a factory of
=============  =========================  =====================================================
STORES         ``stratamem.stores``       ``(location: str) -> Store``, keyed by URL scheme
CONNECTORS     ``stratamem.connectors``   ``() -> Connector``
EMBEDDERS      ``stratamem.embedders``    ``(**options) -> Embedder``
SUMMARIZERS    ``stratamem.summarizers``  ``(**options) -> Summarizer``
RERANKERS      ``stratamem.rerankers``    ``(**options) -> Reranker``
=============  =========================  =====================================================

:func:`open_store` opens a store by path or URL through ``STORES``.

Built-ins are named the way plugins are: by a ``"module:attribute"`` reference, imported only
when their name is asked for, so importing stratamem imports no connector, embedder or
reranker. Third-party plugins come from the registry's entry-point group: the entry point's
name is the plugin's name and its object the factory. A plugin never replaces a built-in name;
:meth:`Registry.register` (a call in code) does. A plugin that fails to import is a
:class:`RegistryError` naming it, never a missing name. An entry point that names a module
rather than an object is imported when the group is first read, for the parts it registers
itself (through :meth:`Registry.register`) when imported.

The factories each registry holds and the protocols their products implement are described
in ``docs/plugins.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from stratamem.errors import RegistryError

if TYPE_CHECKING:
    from stratamem.embed.base import Embedder
    from stratamem.ingest.model import Connector
    from stratamem.retrieval.rerank import Reranker
    from stratamem.store.base import Store
    from stratamem.tree.summarizer import Summarizer

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Registry(Generic[F]):
    """Names → factories of one kind of part, built-ins first, then the entry-point group's.

    A factory is given as the object itself or as a ``"module:attribute"`` reference,
    imported (once) when its name is first asked for.
    """

    def __init__(self, kind: str, group: str, builtins: Mapping[str, F | str]) -> None:
        self.kind = kind
        self.group = group
        self._entries: dict[str, F | EntryPoint] = {}
        self._from_group: set[str] = set()
        self._read = False
        for name, factory in builtins.items():
            self.register(name, factory)

    def copy(self) -> Registry[F]:
        """A registry with the same built-in and registered factories that reads its
        entry-point group again."""
        fresh: Registry[F] = Registry(self.kind, self.group, {})
        fresh._entries = {
            name: entry for name, entry in self._entries.items() if name not in self._from_group
        }
        return fresh

    def register(self, name: str, factory: F | str) -> None:
        """Make ``factory`` (or the object a ``"module:attribute"`` string names) the one
        behind ``name``, replacing any other."""
        self._from_group.discard(name)
        self._entries[name] = (
            EntryPoint(name, factory, self.group) if isinstance(factory, str) else factory
        )

    def known(self) -> list[str]:
        """The names :meth:`load` accepts, sorted. Imports nothing but old-style plugin
        modules (see the module docstring)."""
        self._read_group()
        return sorted(self._entries)

    def load(self, name: str) -> F:
        """The factory behind ``name``, imported if it is not yet."""
        self._read_group()
        try:
            entry = self._entries[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._entries))}"
            ) from None
        if not isinstance(entry, EntryPoint):
            return entry
        factory: F = self._import(entry)
        if self._entries.get(name) is entry:
            self._entries[name] = factory
        return factory

    def create(self: Registry[Callable[..., T]], name: str, /, *args: Any, **options: Any) -> T:
        """``load(name)(*args, **options)``: a new part of this kind."""
        return self.load(name)(*args, **options)

    def _read_group(self) -> None:
        if self._read:
            return
        found = list(entry_points(group=self.group))
        for entry_point in found:
            if entry_point.attr is not None and entry_point.name not in self._entries:
                self._entries[entry_point.name] = entry_point
                self._from_group.add(entry_point.name)
        for entry_point in found:
            if entry_point.attr is None:
                self._import(entry_point)  # a module that registers its parts on import
        self._read = True  # not before: a module that failed to import fails every time

    def _import(self, entry_point: EntryPoint) -> Any:
        try:
            return entry_point.load()
        except Exception as exc:  # a broken plugin must not look like a missing name
            raise RegistryError(
                f"{self.kind} plugin {entry_point.name!r} ({entry_point.value}) failed to "
                f"load: {exc}"
            ) from exc


# The extension points. Stores are opened by :func:`open_store`; the other role modules
# (``stratamem.ingest.registry``, ``stratamem.embed.registry``, ``stratamem.tree.summarizers``,
# ``stratamem.retrieval.rerank``) put a typed front on their registry.

STORES: Registry[Callable[[str], Store]] = Registry(
    "store scheme",
    "stratamem.stores",
    {
        "sqlite": "stratamem.store.urls:open_sqlite",
        "postgresql": "stratamem.store.urls:open_postgres",
        "postgres": "stratamem.store.urls:open_postgres",
    },
)

CONNECTORS: Registry[Callable[[], Connector]] = Registry(
    "connector",
    "stratamem.connectors",
    {
        "discord": "stratamem.ingest.connectors.discord:CONNECTOR",
        "eml": "stratamem.ingest.connectors.eml:EML",
        "irc": "stratamem.ingest.connectors.irc:CONNECTOR",
        "jsonl": "stratamem.ingest.connectors.jsonl:CONNECTOR",
        "maildir": "stratamem.ingest.connectors.maildir:MAILDIR",
        "markdown": "stratamem.ingest.connectors.markdown:CONNECTOR",
        "mbox": "stratamem.ingest.connectors.mbox:MBOX",
        "slack": "stratamem.ingest.connectors.slack:CONNECTOR",
    },
)

EMBEDDERS: Registry[Callable[..., Embedder]] = Registry(
    "embedder",
    "stratamem.embedders",
    {
        "hashing": "stratamem.embed.hashing:HashingEmbedder",
        "minilm": "stratamem.embed.onnx_minilm:MiniLMEmbedder",
        "minilm-fast": "stratamem.embed.onnx_minilm:FastMiniLMEmbedder",
        "openai": "stratamem.embed.http:OpenAIEmbedder",
        "sentence-transformers": (
            "stratamem.embed.sentence_transformers:SentenceTransformerEmbedder"
        ),
    },
)

SUMMARIZERS: Registry[Callable[..., Summarizer]] = Registry(
    "summarizer",
    "stratamem.summarizers",
    {
        "extractive": "stratamem.tree.extractive:ExtractiveSummarizer",
        "llm": "stratamem.tree.summarizers:llm_summarizer",
    },
)

RERANKERS: Registry[Callable[..., Reranker]] = Registry(
    "reranker",
    "stratamem.rerankers",
    {
        "cross-encoder": "stratamem.retrieval.rerank:CrossEncoderReranker",
        "http": "stratamem.retrieval.rerank:HTTPReranker",
    },
)


def open_store(location: str | Path, *, per_thread: bool = False) -> Store:
    """The store at ``location``, opened (and created where the backend creates on open).

    A :class:`~pathlib.Path`, or a string without ``scheme://``, is a SQLite file (``:memory:``
    too); otherwise the URL's scheme names the :data:`STORES` factory, which is given the whole
    location (see :mod:`stratamem.store.urls` for the forms of ``sqlite://`` URLs). An unknown
    scheme is a :class:`RegistryError` listing the known ones. ``per_thread`` (SQLite and
    PostgreSQL) gives every thread that calls the store a connection of its own.
    """
    from stratamem.store.urls import url_scheme

    target = str(location)
    scheme = None if isinstance(location, Path) else url_scheme(target)
    if per_thread:
        from stratamem.store.urls import open_per_thread, open_postgres_per_thread

        if (scheme or "sqlite") == "sqlite":
            return open_per_thread(target)
        if scheme in ("postgresql", "postgres"):
            return open_postgres_per_thread(target)
        raise ValueError(
            f"per_thread opens SQLite files and PostgreSQL databases, not {scheme}:// stores"
        )
    return STORES.create(scheme or "sqlite", target)
