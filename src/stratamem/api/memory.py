"""The Python API: ``mem = stratamem.open(path)``, then ingest, search and inspect.

A :class:`Memory` holds the reads an agent calls directly (:meth:`~Memory.search`, the seven
primitives, :meth:`~Memory.get`, :meth:`~Memory.ingest`, :meth:`~Memory.stats`) and, as
attributes, one facet per group of operations: ``mem.items``, ``mem.facts``, ``mem.sources``,
``mem.principals``, ``mem.locks``, ``mem.trees`` and ``mem.indexes`` (see ``docs/python.md``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stratamem.api._core import Facet, When, when
from stratamem.api.entities import Entities
from stratamem.api.facts import Facts
from stratamem.api.indexes import Indexes
from stratamem.api.items import Items
from stratamem.api.locks import Locks
from stratamem.api.principals import Principals
from stratamem.api.reads import Reads
from stratamem.api.sources import Sources
from stratamem.api.trees import Trees
from stratamem.config import SearchConfig, TreeConfig
from stratamem.embed.base import Embedder
from stratamem.embed.indexing import ACTIVE_MODEL, vector_status
from stratamem.embed.registry import get_embedder
from stratamem.errors import AccessDenied, StoreError, StratamemError
from stratamem.ingest import confine
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.model import Connector
from stratamem.ingest.pipeline import Admit, IngestReport, ProgressCallback, ingest_path
from stratamem.memory import consolidate as consolidating
from stratamem.plugins import open_store
from stratamem.retrieval.legs.keyword import drop_files_holding_removed, open_index
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.retrieval.rerank import Reranker
from stratamem.store.access import parse_scopes
from stratamem.store.base import Store
from stratamem.tree.builder import SealProgress, SealReport
from stratamem.tree.summarizer import Summarizer
from stratamem.types import Principal

__all__ = ["DEFAULT_EMBEDDER", "FACETS", "Memory", "open"]

DEFAULT_EMBEDDER = "minilm"

log = logging.getLogger(__name__)

FACETS: dict[str, type[Facet]] = {
    "entities": Entities,
    "facts": Facts,
    "indexes": Indexes,
    "items": Items,
    "locks": Locks,
    "principals": Principals,
    "sources": Sources,
    "trees": Trees,
}
"""The facets every :class:`Memory` has, by the attribute that holds each."""


class Memory(Reads):
    """A store opened for ingest and retrieval. Use as a context manager or call :meth:`close`.

    ``per_thread=True`` (a SQLite file or a PostgreSQL database) gives each thread that calls
    it its own connection, sharing the in-memory indexes: for a server answering calls on many
    threads at once.

    Besides the reads it holds itself (:meth:`search`, the seven primitives, :meth:`get`,
    :meth:`nodes`, :meth:`related`, :meth:`stats`) and :meth:`ingest`, it has one facet per
    group of operations: :attr:`items`, :attr:`entities`, :attr:`facts`, :attr:`sources`,
    :attr:`principals`,
    :attr:`locks`, :attr:`trees` and :attr:`indexes`. Every time argument takes a
    ``datetime`` or a string the command line reads (``2024-03-12``, ``7d``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: str | Embedder | None = DEFAULT_EMBEDDER,
        reranker: Reranker | None = None,
        config: SearchConfig | None = None,
        summarizer: Summarizer | None = None,
        tree_config: TreeConfig | None = None,
        principal: str | None = None,
        unlock: Mapping[str, str] | Sequence[str] | None = None,
        per_thread: bool = False,
    ) -> None:
        if unlock and per_thread:
            raise ValueError("an unlocked store lives in one connection: it cannot be per thread")
        if unlock:
            from stratamem.access.locks import open_unlocked

            self.store: Store = open_unlocked(path, unlock)
        else:
            self.store = open_store(path, per_thread=per_thread)
        try:
            self.store.read_as(principal)
            # A forget or lock killed before it rewrote the index files left them holding
            # what it removed (the database itself was scrubbed as the store opened).
            drop_files_holding_removed(self.store)
        except BaseException:
            self.store.close()
            raise
        # Where it was opened: a store's ``path`` leaves a URL's password out.
        self._location = path
        self._open_args: dict[str, Any] = {
            "embedder": embedder,
            "reranker": reranker,
            "config": config,
            "summarizer": summarizer,
            "tree_config": tree_config,
            "unlock": unlock,
        }
        self.summarizer = summarizer
        self.tree_config = tree_config or TreeConfig()
        self._embedder_choice = embedder
        self._embedder: Embedder | None = None
        self._embedder_error: str | None = None
        self._vectors: VectorLeg | None = None
        self._making = threading.Lock()
        self.reranker = reranker
        self.config = config or self._tuned_config()
        self.items = Items(self)
        self.entities = Entities(self)
        self.facts = Facts(self)
        self.sources = Sources(self)
        self.principals = Principals(self)
        self.locks = Locks(self)
        self.trees = Trees(self)
        self.indexes = Indexes(self)

    def _tuned_config(self) -> SearchConfig:
        """The default search settings with the weights ``tune --save`` kept in the store."""
        from stratamem.config import TUNED_KEY, tuned_layer

        layer, _ = tuned_layer(self.store.get_setting(TUNED_KEY))
        return SearchConfig(weights=layer.get("search.weights", {}))

    @property
    def embedder(self) -> Embedder | None:
        """The configured embedder, created on first use (None if none or it cannot load)."""
        if self._embedder is None and self._embedder_error is None:
            choice = self._embedder_choice
            if choice is None:
                self._embedder_error = "no embedder configured"
            elif isinstance(choice, str):
                try:
                    self._embedder = get_embedder(choice)
                except StratamemError as exc:
                    self._embedder_error = str(exc)
            else:
                self._embedder = choice
        return self._embedder

    def _require_embedder(self) -> Embedder:
        embedder = self.embedder
        if embedder is None:
            raise StratamemError(f"cannot embed: {self._embedder_error}")
        return embedder

    @property
    def vectors(self) -> VectorLeg | None:
        """The vector leg, made once (threads reading one memory at once share it)."""
        if self._vectors is None and self.embedder is not None:
            with self._making:
                if self._vectors is None:
                    self._vectors = VectorLeg(self.store, self.embedder)
        return self._vectors

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Finish any index save still running, then close the store."""
        keyword = open_index(self.store)
        for saver in (
            keyword.saver if keyword is not None else None,
            self._vectors.saver if self._vectors is not None else None,
        ):
            if saver is not None:
                saver.flush()
        self.store.close()

    @property
    def path(self) -> str:
        return self.store.path

    # -- who reads -----------------------------------------------------------------------------

    @property
    def principal(self) -> Principal | None:
        """Who reads through this memory (None: the owner, who sees every unlocked source)."""
        return self.store.principal()

    def as_principal(self, name: str) -> Memory:
        """This store opened again for principal ``name``: every read sees only the sources
        its scopes allow. :class:`AccessDenied` if there is no such principal."""
        if self.store.path == ":memory:":
            raise ValueError("a store in memory cannot be opened twice: use a file")
        return Memory(self._location, principal=name, **self._open_args)

    def _owner_only(self, action: str) -> None:
        found = self.store.principal()
        if found is not None:
            raise AccessDenied(f"principal {found.name!r} may not {action}")

    @property
    def _unlocked(self) -> bool:
        """Whether this memory was opened with locked sources decrypted (read-only)."""
        return bool(self._open_args["unlock"])

    def ingest(
        self,
        path: str | Path,
        *,
        format: str | None = None,
        scope: str | None = None,
        chunking: ChunkingConfig | None = None,
        progress: ProgressCallback | None = None,
        parallel: bool | None = None,
        connector: Connector | None = None,
        trees: bool = True,
        tree_progress: Callable[[SealProgress], None] | None = None,
        max_item_bytes: int | None = None,
        sync: bool = False,
        access: str | Sequence[str] | None = None,
        admit: Admit | None = None,
        now: When | None = None,
        embed: bool = False,
        join: bool = False,
        writer: str | None = None,
    ) -> IngestReport:
        """Read ``path`` with the detected (or named) connector into the store.

        Chat, mail and record sources merge: new records are added, changed ones updated,
        and records the export lacks are kept; ``sync=True`` takes each source read as the
        whole truth and removes the records it lacks. Documents are replaced where they
        changed (see ``docs/ingest.md``).

        Each source is written in one transaction; a source that fails is rolled back whole
        and reported in the result, the others go on. ``parallel`` reads in a child process
        while this one writes (default: where fork exists and there are two or more CPUs).
        Then the changed sources' summary trees are sealed (``trees=False`` leaves that
        queued for ``mem.trees.build``; the seal jobs of other sources are left to it either
        way); the result's ``trees`` says what was sealed, and what failed (a sealing that
        fails, the disk full say, leaves the sources written and the seal jobs queued).
        ``max_item_bytes`` bounds one item (a file, a zip member, a line; default 64 MiB):
        larger ones are skipped and reported. ``access`` sets the access scopes of every
        source read (``eng,team``); by default a new source gets its kind's (chat ``team``,
        the rest ``private``) and an existing one keeps its own. ``admit`` sees each source
        before it is written and may refuse it (see :func:`~stratamem.ingest.pipeline.ingest_path`).
        ``now`` is the transaction time of the facts the sources' structure states (default:
        the clock). ``embed=True`` embeds the chunks of the sources read that wait for a
        vector afterwards (as ``mem.indexes.embed``), where an embedder is configured;
        ``report.embedded`` says how many got one, those whose vector the model had made for
        the same text already included. Both say nothing of any other source.
        A source a principal made (``bob/mail``: see ``Source.created_by``) takes nothing
        unless ``join=True``: it fails in the report, the others go on. ``writer`` is the
        principal the ingest is made for (a server's, after ``admit`` checks it): its new
        sources go in its namespace (``<writer>/<scope>``) and are recorded as its.
        """
        self._owner_only("ingest")
        at = when(now, "now")
        consolidation = consolidating.queue_after_ingest(self.store)
        base = self.store.index_base()
        # The store's own files are never read, whoever ingests (see ingest.confine).
        with confine.keeping_out(None if base is None else confine.store_files(base)):
            report = ingest_path(
                self.store,
                path,
                kind=format,
                scope=scope,
                config=chunking,
                progress=progress,
                parallel=parallel,
                connector=connector,
                max_item_bytes=max_item_bytes,
                sync=sync,
                access=None if access is None else parse_scopes(access),
                admit=admit,
                embedder=self._write_embedder(),
                now=at,
                writer=writer,
                join=join,
            )
        # The work after the write is this ingest's own: the trees and chunks of the sources
        # it wrote, whatever else waits. Its report then tells a principal writing through
        # the owner's memory nothing of a source hidden from it (a seal job, a chunk that
        # waits for a vector, a text embedded there already).
        written = sorted({s.source_id for s in report.sources if s.error is None})
        if trees:
            try:
                report.trees = self.trees.build(progress=tree_progress, sources=written)
            except StoreError as exc:
                # The sources are committed whatever befalls the sealing after them (a full
                # disk, a store kept busy): the report says they were written, and that the
                # sealing failed and stays queued for the next run.
                log.warning("sealing the trees after ingest failed: %s", exc)
                report.trees = SealReport(failed=[f"sealing stays queued: {exc}"])
        if embed:
            report.embedded = 0
            if self.embedder is not None and self.indexes.pending(sources=written):
                # A chunk whose vector the model made for the same text before counts too:
                # whether a text is held elsewhere in the store is not this report's to say.
                done = self.indexes.embed(sources=written)
                report.embedded = done.embedded + done.cached
        self.facts._after_ingest(report)
        if consolidation:
            try:
                consolidating.run_job(self.store)
            except StratamemError as exc:  # the job stays queued, to be retried
                log.warning("consolidation after ingest failed: %s", exc)
        return report

    def _write_embedder(self) -> Embedder | None:
        """The embedder that single writes embed with: the configured one, where the store's
        vectors are of its model (else the new chunks wait for ``mem.indexes.embed``)."""
        if self.store.get_setting(ACTIVE_MODEL) is None:
            return None  # no vectors yet: nothing to load a model for
        embedder = self._loaded_embedder()
        if embedder is None or vector_status(self.store, embedder) is not None:
            return None
        return embedder

    def _first_write_embedder(self) -> Embedder | None:
        """The embedder that items and messages are written with: as :meth:`_write_embedder`,
        and on a store that holds nothing yet the configured one, whose model the first
        write makes the store's (so the vector leg works from the first write on)."""
        if self.store.get_setting(ACTIVE_MODEL) is None and self.store.chunk_count() == 0:
            return self.embedder
        return self._write_embedder()

    def _loaded_embedder(self) -> Embedder | None:
        """The embedder, but only where the store already holds its vectors: loading a model
        just to embed summaries that nothing can compare them with would be waste."""
        if self.store.get_setting("embed.model") is None:
            return None
        return self.embedder

    def stats(self) -> dict[str, Any]:
        """Counts over what the reader may see; for the owner also the state of the store's
        machinery: vectors (model, count, pending, index mode), trees and their seal jobs,
        facts and rollups, and the reranker."""
        out = self.store.stats()
        if self.principal is None:
            out.update(self._state())
        return out

    def _state(self) -> dict[str, Any]:
        from stratamem.retrieval.index.vectors import DEFAULT_HNSW_THRESHOLD
        from stratamem.store.jobs import SEAL_KIND

        embedder = self.embedder
        models = self.store.vector_models()
        active = self.store.get_setting(ACTIVE_MODEL)
        count = models.get(active, 0) if active else 0
        threshold = self.vectors.hnsw_threshold if self.vectors else DEFAULT_HNSW_THRESHOLD
        vectors: dict[str, Any] = {
            "model": active,
            "configured": embedder.spec.signature if embedder else None,
            "count": count,
            "pending": self.indexes.pending(),
            "index": "hnsw" if count >= threshold else "exact",
            "status": (vector_status(self.store, embedder) or "ok")
            if embedder
            else "off: no embedder configured",
        }
        jobs = self.store.jobs.counts(kind=SEAL_KIND)
        return {
            "vectors": vectors,
            "keyword": {"tokenizer": self.indexes.keyword_tokenizer()},
            "trees": {
                "trees": len(self.trees.list()),
                "seal_jobs_pending": jobs.get("pending", 0) + jobs.get("running", 0),
                "seal_jobs_failed": jobs.get("failed", 0),
            },
            "facts": len(self.store.facts(limit=1_000_000_000)),
            "rollups": len(self.store.rollups(limit=1_000_000_000)),
            "rerank": self.reranker.name if self.reranker is not None else None,
        }


def open(
    path: str | Path,
    *,
    embedder: str | Embedder | None = DEFAULT_EMBEDDER,
    reranker: Reranker | None = None,
    config: SearchConfig | None = None,
    summarizer: Summarizer | None = None,
    tree_config: TreeConfig | None = None,
    principal: str | None = None,
    unlock: Mapping[str, str] | Sequence[str] | None = None,
) -> Memory:
    """Open (creating if needed) the store at ``path``: a file path, ``:memory:``, or a URL
    whose scheme names a registered store (``sqlite:///agent.db``; see ``docs/plugins.md``).

        ``embedder`` is a registered name (default ``minilm``, bundled and offline), an
        :class:`Embedder`, or None for keyword and graph search only. ``summarizer`` writes the
        summary trees (default: the extractive one, no model needed); ``tree_config`` sets when
        buffers seal.

    ``principal`` names who reads: every read then sees only the sources its scopes allow,
    and writes are refused. ``unlock`` makes locked sources readable in this process only
    (a mapping source → passphrase, or sources whose passphrase is in
    ``STRATAMEM_PASSPHRASE``): the store is read into memory with them decrypted, nothing
    decrypted is written to disk, and that memory is read-only. See ``docs/access.md``.
    """
    return Memory(
        path,
        embedder=embedder,
        reranker=reranker,
        config=config,
        summarizer=summarizer,
        tree_config=tree_config,
        principal=principal,
        unlock=unlock,
    )
