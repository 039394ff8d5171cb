"""The Python API: ``mem = stratamem.open(path)``, then ingest, search and inspect."""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from stratamem.access import principals
from stratamem.config import SearchConfig, TreeConfig
from stratamem.embed.base import Embedder
from stratamem.embed.indexing import (
    ACTIVE_MODEL,
    EmbedProgress,
    EmbedReport,
    embed_pending,
    reindex,
    vector_status,
)
from stratamem.embed.registry import get_embedder
from stratamem.entities.search import neighbours, search_entities
from stratamem.errors import (
    AccessDenied,
    LockError,
    NotFoundError,
    StoreError,
    StoreFull,
    StratamemError,
)
from stratamem.ingest import items
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.conversation import MessagesWrite, add_messages
from stratamem.ingest.items import ItemVersion, ItemWrite
from stratamem.ingest.model import Connector
from stratamem.ingest.pipeline import Admit, IngestReport, ProgressCallback, ingest_path
from stratamem.memory import consolidate as consolidating
from stratamem.memory import remember as remembering
from stratamem.memory.consolidate import ConsolidationProgress, ConsolidationReport
from stratamem.memory.search import FactHit, search_facts
from stratamem.plugins import open_store
from stratamem.retrieval import primitives
from stratamem.retrieval.hybrid import HybridSearcher
from stratamem.retrieval.legs.keyword import (
    drop_files_holding_removed,
    index_file,
    keyword_search,
    open_index,
    sparse_index,
)
from stratamem.retrieval.legs.vector import VectorLeg, drop_other_vector_files
from stratamem.retrieval.rerank import Reranker
from stratamem.retrieval.scope import resolve, source_filters
from stratamem.retrieval.tree_hits import leaf_evidence
from stratamem.store.access import parse_scopes
from stratamem.store.base import Store
from stratamem.store.facts import Fact, FactWrite, Origin
from stratamem.store.rollups import Rollup
from stratamem.tree.builder import SealProgress, SealReport, TreeBuilder
from stratamem.tree.summarizer import Summarizer
from stratamem.types import (
    EntityMatch,
    Filters,
    Identity,
    Principal,
    QueryResponse,
    Record,
    RetrievalHit,
    SearchResponse,
    Source,
    SourceKind,
    Tree,
)

if TYPE_CHECKING:
    from stratamem.access.locks import LockReport
    from stratamem.memory.extract import ExtractProgress, ExtractReport

DEFAULT_EMBEDDER = "minilm"
EVIDENCE_POOL = 100

log = logging.getLogger(__name__)


P = ParamSpec("P")
R = TypeVar("R")


def _in_one_snapshot(
    method: Callable[Concatenate[Memory, P], R],
) -> Callable[Concatenate[Memory, P], R]:
    """Run the method in one read snapshot of the store: its evidence search and the
    primitive it feeds read the same version, whatever other processes commit meanwhile."""

    def wrapper(self: Memory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.store.read_snapshot():
            return method(self, *args, **kwargs)

    functools.update_wrapper(wrapper, method)
    return wrapper


class Memory:
    """A store opened for ingest and retrieval. Use as a context manager or call :meth:`close`.

    ``per_thread=True`` (a SQLite file or a PostgreSQL database) gives each thread that calls
    it its own connection, sharing the in-memory indexes: for a server answering calls on many
    threads at once.
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

    def _tuned_config(self) -> SearchConfig:
        """The default search settings with the weights ``tune --save`` kept in the store."""
        from stratamem.config import TUNED_KEY, tuned_layer

        layer, _ = tuned_layer(self.store.get_setting(TUNED_KEY))
        return SearchConfig(weights=layer.get("search.weights", {}))

    def save_tuned_weights(self, record: Mapping[str, Any]) -> None:
        """Keep tuned fusion weights in the store (``record``: ``weights`` and how they were
        chosen — dataset, metric, split, score); every later search that is not given weights
        or a profile uses them."""
        from stratamem.config import TUNED_KEY, tuned_layer

        self._owner_only("save tuned weights")
        raw = json.dumps(dict(record), sort_keys=True)
        if not tuned_layer(raw)[0]:
            raise ValueError("tuned weights need a 'weights' mapping of leg → weight")
        with self.store.transaction():
            self.store.set_setting(TUNED_KEY, raw)
        self.config = replace(self.config, weights=json.loads(raw)["weights"])

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

    def authenticate(self, token: str) -> Principal:
        """The principal a bearer token belongs to; :class:`AccessDenied` if none."""
        return principals.authenticate(self.store, token)

    def add_principal(
        self,
        name: str,
        scopes: str | Sequence[str],
        *,
        sources: Sequence[str] = (),
        write: bool = False,
    ) -> str:
        """Create a principal that reads sources sharing one of ``scopes`` (``*``: any)
        and, if ``sources`` globs are given, matching one of them; returns its bearer token,
        which is not stored and cannot be shown again."""
        self._owner_only("manage principals")
        return principals.add_principal(self.store, name, scopes, sources=sources, write=write)

    def principals(self) -> list[Principal]:
        self._owner_only("list principals")
        return self.store.principals()

    def remove_principal(self, name: str) -> None:
        self._owner_only("manage principals")
        if not self.store.delete_principal(name):
            raise NotFoundError(f"no principal named {name!r}")

    def rotate_principal(self, name: str) -> str:
        """A new token for the principal (the old one stops working at once)."""
        self._owner_only("manage principals")
        return principals.rotate_token(self.store, name)

    def set_access(
        self,
        source: str,
        *,
        scopes: str | Sequence[str] | None = None,
        add: str | Sequence[str] = (),
        remove: str | Sequence[str] = (),
    ) -> Source:
        """Change a source's access scopes: replace them (``scopes``), then ``add`` and
        ``remove`` some. A source left with none is readable by the owner only."""
        self._owner_only("change access")
        found = self.store.resolve_source(source)
        current = set(found.access if scopes is None else parse_scopes(scopes))
        current |= set(parse_scopes(add))
        current -= set(parse_scopes(remove))
        self.store.set_access(found.id, sorted(current))
        return self.store.resolve_source(found.id)

    # -- locks ---------------------------------------------------------------------------------

    def lock(self, source: str, *, passphrase: str | None = None) -> LockReport:
        """Encrypt a source at rest and purge every plaintext trace of it (chunks, full-text
        rows, vectors, entities, edges, summaries; the index files beside the store are
        rewritten). Nothing of it can be read until :meth:`unlock`. The passphrase is
        ``passphrase``, else ``STRATAMEM_PASSPHRASE``; see ``docs/access.md``."""
        self._owner_only("lock sources")
        from stratamem.access import locks

        found = self.store.resolve_source(source)
        self._ready_indexes()
        report = locks.lock_source(self.store, found.id, locks.passphrase_for(found, passphrase))
        self._rewrite_indexes()
        return report

    def unlock(self, source: str, *, passphrase: str | None = None) -> LockReport:
        """Decrypt a locked source for good and restore everything derived from it."""
        self._owner_only("unlock sources")
        from stratamem.access import locks

        found = self.store.resolve_source(source)
        return locks.unlock_source(self.store, found.id, locks.passphrase_for(found, passphrase))

    def _ready_indexes(self) -> None:
        """Open the saved vector index while it still matches the store, so that a removal
        brings it up to date rather than rebuilding it."""
        vectors = self.vectors
        keep = vectors.index_path() if vectors is not None else None
        if vectors is not None and keep is not None and keep.exists():
            vectors.index()

    def _rewrite_indexes(self) -> None:
        """After a removal: rewrite the index files beside the store without what went, and
        remove those that cannot be brought up to date, or written (a full disk): they are
        rebuilt when next searched."""
        vectors = self.vectors
        keep = vectors.index_path() if vectors is not None else None
        try:
            sparse_index(self.store).persist_now()
        except OSError as exc:
            log.warning("the keyword index file could not be rewritten, removing it: %s", exc)
            stale = index_file(self.store)
            if stale is not None:
                stale.unlink(missing_ok=True)
        if vectors is not None:
            try:
                vectors.persist_now()
            except OSError as exc:
                log.warning("the vector index file could not be rewritten, removing it: %s", exc)
                keep = None
        drop_other_vector_files(self.store, keep)

    def ingest(
        self,
        path: str | Path,
        *,
        kind: str | None = None,
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
        now: datetime | None = None,
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
        queued for :meth:`build_trees`); the result's ``trees`` says what was sealed, and what
        failed (a sealing that fails, the disk full say, leaves the sources written and the
        seal jobs queued).
        ``max_item_bytes`` bounds one item (a file, a zip member, a line; default 64 MiB):
        larger ones are skipped and reported. ``access`` sets the access scopes of every
        source read (``eng,team``); by default a new source gets its kind's (chat ``team``,
        the rest ``private``) and an existing one keeps its own. ``admit`` sees each source
        before it is written and may refuse it (see :func:`~stratamem.ingest.pipeline.ingest_path`).
        ``now`` is the transaction time of the facts the sources' structure states (default:
        the clock).
        """
        self._owner_only("ingest")
        consolidation = consolidating.queue_after_ingest(self.store)
        report = ingest_path(
            self.store,
            path,
            kind=kind,
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
            now=now,
        )
        if trees:
            try:
                report.trees = self.build_trees(progress=tree_progress)
            except StoreError as exc:
                # The sources are committed whatever befalls the sealing after them (a full
                # disk, a store kept busy): the report says they were written, and that the
                # sealing failed and stays queued for the next run.
                log.warning("sealing the trees after ingest failed: %s", exc)
                report.trees = SealReport(failed=[f"sealing stays queued: {exc}"])
        self._extract_after_ingest(report)
        if consolidation:
            try:
                consolidating.run_job(self.store)
            except StratamemError as exc:  # the job stays queued, to be retried
                log.warning("consolidation after ingest failed: %s", exc)
        return report

    # -- single items ------------------------------------------------------------------------

    def add(
        self,
        text: str,
        *,
        source: str = items.DEFAULT_SOURCE,
        kind: SourceKind | str | None = None,
        author: str | None = None,
        time: datetime | None = None,
        id: str | None = None,
        title: str | None = None,
        thread: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> ItemWrite:
        """Write one item (a memory, a message, a note) to ``source`` and return its id.

        The item is found by keyword and graph search as soon as this returns, and by the
        vector leg too when the store's vectors are of the configured embedder's model, or
        the store holds nothing yet (it is embedded in the same transaction; otherwise it
        waits for :meth:`embed`). ``time`` defaults to now, ``id`` to a new key; an ``id``
        the source holds already is replaced. A new ``source`` is made as a record source (or
        ``kind``). ``user``, ``agent`` and ``session`` put the item in that identity's
        source of base ``source`` (``memory/user:maya``: see ``docs/memory.md``). The
        source's summary tree is queued to be sealed (see :meth:`build_trees`).
        """
        self._owner_only("write items")
        return items.add_item(
            self.store,
            text,
            source=source,
            kind=kind,
            author=author,
            time=time,
            id=id,
            title=title,
            thread=thread,
            tags=tags,
            meta=meta,
            user=user,
            agent=agent,
            session=session,
            embedder=self._first_write_embedder(),
        )

    def add_messages(
        self,
        messages: Sequence[Any],
        *,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
        now: datetime | None = None,
    ) -> MessagesWrite:
        """Write the turns of a conversation (``{"role", "content"}`` messages, with an
        optional ``name``, ``time`` and ``id``) to the chat source of ``user``, ``agent`` and
        ``session`` (``chat/user:maya/session:s1``), in one transaction: found by keyword and
        graph search at once, by the vector leg once embedded (right after the write, where
        the store's vectors are of the configured embedder's model or it holds nothing yet).
        A retried call changes nothing; a bad message is skipped and the report says why.
        ``now`` is the time of turns given none (default: the clock). See
        ``docs/memory.md``."""
        self._owner_only("write messages")
        return add_messages(
            self.store,
            messages,
            user=user,
            agent=agent,
            session=session,
            now=now,
            embedder=self._first_write_embedder(),
        )

    def update(
        self,
        id: str,
        *,
        source: str | None = None,
        text: str | None = None,
        author: str | None = items.UNSET,
        time: datetime | None = items.UNSET,
        title: str | None = items.UNSET,
        tags: Sequence[str] | None = None,
        meta: Mapping[str, Any] | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> ItemWrite:
        """Correct the item stored under ``id``: the fields given change, the others stay.
        ``source`` (id or scope), or ``user``, ``agent`` and ``session``, are needed only
        when several sources hold that id."""
        self._owner_only("write items")
        return items.update_item(
            self.store,
            id,
            source=source,
            text=text,
            author=author,
            time=time,
            title=title,
            tags=tags,
            meta=meta,
            user=user,
            agent=agent,
            session=session,
            embedder=self._write_embedder(),
        )

    def delete(
        self,
        id: str,
        *,
        source: str | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> ItemWrite:
        """Remove the item stored under ``id`` from every index at once. Its history stays:
        the removal is a version of its own (see :meth:`item_history`)."""
        self._owner_only("write items")
        return items.delete_item(
            self.store,
            id,
            source=source,
            user=user,
            agent=agent,
            session=session,
            embedder=self._write_embedder(),
        )

    def item(
        self,
        id: str,
        *,
        source: str | None = None,
        as_of: datetime | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> Record:
        """The item (record) stored under ``id`` (of ``user``, ``agent``, ``session`` where
        given; its source's scope says whose it is); with ``as_of``, the one it was at that
        time (:class:`NotFoundError` before its first version or while it was removed)."""
        if as_of is not None:
            whose = Identity.of(user=user, agent=agent, session=session)
            if source is None and whose:
                source = items.identity_scope(items.DEFAULT_SOURCE, whose)
            return items.get_item(self.store, id, source=source, as_of=as_of).record()
        found = items.find_item(
            self.store, id, source=source, user=user, agent=agent, session=session
        )
        return found[1].record

    def item_history(self, id: str, *, source: str | None = None) -> list[ItemVersion]:
        """Every version of the item under ``id``, oldest first: each with its fields, what
        opened it (``added``, ``edited``, ``removed``) and when the store held it
        (``recorded_at`` to ``closed_at``). See ``docs/memory.md``."""
        return items.item_history(self.store, id, source=source)

    def _write_embedder(self) -> Embedder | None:
        """The embedder that single writes embed with: the configured one, where the store's
        vectors are of its model (else the new chunks wait for :meth:`embed`)."""
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

    # -- summary trees -----------------------------------------------------------------------

    @property
    def tree_builder(self) -> TreeBuilder:
        return TreeBuilder(
            self.store,
            summarizer=self.summarizer,
            embedder=self._embedder if self._embedder is not None else self._loaded_embedder(),
            config=self.tree_config,
        )

    def _loaded_embedder(self) -> Embedder | None:
        """The embedder, but only where the store already holds its vectors: loading a model
        just to embed summaries that nothing can compare them with would be waste."""
        if self.store.get_setting("embed.model") is None:
            return None
        return self.embedder

    def build_trees(self, *, progress: Callable[[SealProgress], None] | None = None) -> SealReport:
        """Run the queued seal jobs (ingest queues one per changed source)."""
        self._owner_only("seal trees")
        return self.tree_builder.run_pending(progress=progress)

    def flush(
        self,
        sources: Sequence[str] = (),
        *,
        progress: Callable[[SealProgress], None] | None = None,
    ) -> SealReport:
        """Seal every partial level-0 buffer now (of these sources, or all), however young.
        Upper levels still wait for a full fan-out. A tree whose seal job another live
        process holds is left to it: the report's ``held`` names it."""
        self._owner_only("seal trees")
        builder = self.tree_builder
        builder.enqueue(sources, force=True)
        return builder.run_pending(progress=progress)

    def trees(self) -> list[Tree]:
        return self.store.trees.all()

    def tree(self, source: str) -> Tree:
        """The summary tree of a source (by id or scope)."""
        found = self.store.resolve_source(source)
        tree = self.store.trees.of_source(found.id)
        if tree is None:
            raise NotFoundError(f"source {found.scope!r} has no summary tree yet")
        return tree

    def tree_stats(self, tree_id: str) -> dict[int, tuple[int, int]]:
        """Per level of a tree: (live summaries, how many of them have no parent yet)."""
        return self.store.trees.stats(tree_id)

    def tree_tops(self, tree_id: str) -> list[RetrievalHit]:
        """A tree's summaries that have no parent yet, highest level first, newest first."""
        return self.nodes(self.store.trees.top_ids(tree_id))

    def unsealed_leaves(self, tree_id: str) -> int:
        """How many chunks wait in a tree's level-0 buffer for the next seal."""
        tree = self.store.trees.get(tree_id)
        if tree is None:
            raise NotFoundError(f"no tree with id {tree_id!r}")
        return len(self.store.trees.leaf_buffer(tree.source_id))

    @_in_one_snapshot
    def query_source(
        self,
        source: str | None = None,
        *,
        source_kind: str | None = None,
        time_window_days: float | None = None,
        query: str | None = None,
        limit: int = primitives.DEFAULT_LIMIT,
        now: datetime | None = None,
        filters: Filters | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """Summaries of one source, a kind of source, or all; newest first or by ``query``.
        ``user``, ``agent`` and ``session`` (one id or several each) narrow every primitive
        to the memory of those users, agents and sessions (see ``docs/memory.md``)."""
        filters = self._scoped(filters, user, agent, session)
        # The search evidence comes from the leaves the summaries cover; None: no summary can.
        scoped = source_filters(
            self.store,
            filters,
            source=source,
            source_kind=source_kind,
            days=time_window_days,
            now=now,
        )
        return primitives.query_source(
            self.store,
            source=source,
            source_kind=source_kind,
            time_window_days=time_window_days,
            query=query,
            embedder=self._query_embedder(query),
            evidence=None if scoped is None else self._evidence(query, scoped),
            limit=limit,
            now=now,
            filters=filters,
        )

    @_in_one_snapshot
    def query_global(
        self,
        *,
        since: datetime,
        until: datetime,
        source_kind: str | None = None,
        query: str | None = None,
        limit: int = primitives.DEFAULT_LIMIT,
        filters: Filters | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """Summaries of every source overlapping [since, until]."""
        filters = self._scoped(filters, user, agent, session)
        return primitives.query_global(
            self.store,
            since=since,
            until=until,
            source_kind=source_kind,
            query=query,
            embedder=self._query_embedder(query),
            evidence=self._evidence(query, filters, since=since, until=until),
            limit=limit,
            filters=filters,
        )

    @_in_one_snapshot
    def query_topic(
        self,
        entity_id: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        query: str | None = None,
        limit: int = primitives.DEFAULT_LIMIT,
        filters: Filters | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """Summaries and leaves that name a canonical entity id (``user:maya`` names every
        chunk of maya's memory)."""
        filters = self._scoped(filters, user, agent, session)
        return primitives.query_topic(
            self.store,
            entity_id,
            since=since,
            until=until,
            query=query,
            embedder=self._query_embedder(query),
            evidence=self._evidence(query, filters, since=since, until=until),
            limit=limit,
            filters=filters,
        )

    def cover_window(
        self,
        *,
        since: datetime,
        until: datetime,
        limit: int = primitives.COVER_DEFAULT_LIMIT,
        filters: Filters | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """The fewest summaries and leaves covering every leaf in [since, until]."""
        filters = self._scoped(filters, user, agent, session)
        return primitives.cover_window(
            self.store, since=since, until=until, limit=limit, filters=filters
        )

    @_in_one_snapshot
    def drill_down(
        self,
        node_id: str,
        *,
        max_depth: int = 1,
        query: str | None = None,
        limit: int | None = None,
        filters: Filters | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[RetrievalHit]:
        """A summary's descendants, ``max_depth`` levels down, breadth first."""
        filters = self._scoped(filters, user, agent, session)
        return primitives.drill_down(
            self.store,
            node_id,
            max_depth=max_depth,
            query=query,
            embedder=self._query_embedder(query),
            evidence=self._evidence(query, filters),
            limit=limit,
            filters=filters,
        )

    def fetch_leaves(
        self,
        chunk_ids: Sequence[str],
        *,
        filters: Filters | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[RetrievalHit]:
        """Up to 20 chunks by id, in the order asked; missing ids are skipped."""
        filters = self._scoped(filters, user, agent, session)
        return primitives.fetch_leaves(self.store, chunk_ids, filters=filters)

    def _scoped(
        self,
        filters: Filters | None,
        user: str | Sequence[str] | None,
        agent: str | Sequence[str] | None,
        session: str | Sequence[str] | None,
    ) -> Filters | None:
        """``filters`` narrowed to the memory of ``user``, ``agent`` and ``session``: the
        filters' own sources (and users) resolved first, so that both apply."""
        wanted = Filters(users=_ids(user), agents=_ids(agent), sessions=_ids(session))
        if not wanted.names_identity:
            return filters
        base = resolve(self.store, filters or Filters())
        if base is None:
            return filters  # nothing matches them already: the read answers so
        return replace(base, users=wanted.users, agents=wanted.agents, sessions=wanted.sessions)

    def _evidence(
        self,
        query: str | None,
        filters: Filters | None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, float] | None:
        """The hybrid search's best leaves for ``query`` under the same filters, their scores
        spread up the trees (see :func:`~stratamem.retrieval.tree_hits.leaf_evidence`)."""
        if not query or not query.strip():
            return None
        base = filters or Filters()
        try:
            found = self.search(
                query,
                sources=base.sources,
                kinds=base.kinds,
                since=since or base.since,
                until=until or base.until,
                user=base.users,
                agent=base.agents,
                session=base.sessions,
                limit=EVIDENCE_POOL,
                rerank=False,
                diversify=False,
            )
        except (StratamemError, ValueError) as exc:
            log.warning("no search evidence for ranking: %s", exc)
            return None
        return leaf_evidence(self.store, {h.node_id: h.score for h in found.hits})

    def _query_embedder(self, query: str | None) -> Embedder | None:
        """The embedder for ranking by ``query``, only when the store has vectors of it."""
        if not query or not query.strip():
            return None
        embedder = self.embedder
        if embedder is None or vector_status(self.store, embedder) is not None:
            return None
        return embedder

    def search(
        self,
        query: str,
        *,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 10,
        budget: int | None = None,
        mode: str = "hybrid",
        profile: str | None = None,
        weights: Mapping[str, float] | None = None,
        rerank: bool = True,
        diversify: bool = True,
        config: SearchConfig | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> SearchResponse:
        """The best evidence for ``query`` among the filtered sources.

        ``mode`` is ``hybrid`` (keyword, vector and graph legs fused, expanded, diversified),
        ``keyword`` (BM25 only, with snippets), ``vector`` or ``graph`` (one leg through the
        same pipeline). ``budget`` packs the hits into that many tokens as cards (0: every
        hit whole). ``profile`` names a weight profile (dropping tuned weights); ``weights``
        (leg → weight) override the profile's for this call. ``user``, ``agent`` and
        ``session`` (one id or several each) keep the memory of those users, agents and
        sessions (their items, turns and facts' sources: see ``docs/memory.md``).
        """
        filters = Filters(
            sources=tuple(sources),
            kinds=tuple(SourceKind(k) for k in kinds),
            since=since,
            until=until,
            users=_ids(user),
            agents=_ids(agent),
            sessions=_ids(session),
        )
        if mode == "keyword":
            found = keyword_search(self.store, query, filters=filters, limit=limit)
            return SearchResponse(
                hits=found.hits, total=found.total, legs={"keyword": "ok"}, budget=budget
            )
        legs = {
            "hybrid": ("keyword", "vector", "graph"),
            "vector": ("vector",),
            "graph": ("graph",),
        }.get(mode)
        if legs is None:
            raise ValueError(f"unknown search mode {mode!r}; use hybrid, keyword, vector or graph")
        config = config or self.config
        if profile is not None:
            # A profile asked for by name is that profile, whatever weights were tuned.
            config = replace(config, profile=profile, weights={})
        if weights is not None:
            config = replace(config, weights=dict(weights))
        searcher = HybridSearcher(
            self.store, vectors=self.vectors, reranker=self.reranker, config=config
        )
        return searcher.search(
            query,
            filters=filters,
            limit=limit,
            budget=budget,
            legs=legs,
            rerank=rerank,
            diversify=diversify,
        )

    def embed(self, *, progress: Callable[[EmbedProgress], None] | None = None) -> EmbedReport:
        """Embed every chunk that has no vector yet with the configured model. Each batch
        commits on its own: a disk that fills up keeps what was embedded before it
        (:class:`~stratamem.errors.StoreFull` says how much, and how much is left)."""
        self._owner_only("embed")
        embedder = self._require_embedder()
        committed = EmbedProgress()  # as of the last batch committed

        def track(state: EmbedProgress) -> None:
            committed.done = state.done
            if progress is not None:
                progress(state)

        adopting = self.store.get_setting(ACTIVE_MODEL) is None
        try:
            report = embed_pending(self.store, embedder, progress=track)
            if adopting:
                # The facts written before the store had a model get the vectors those
                # written after it get as they are written.
                with self.store.transaction():
                    remembering.embed_facts(self.store, embedder)
            return report
        except StoreFull as exc:
            left = self.store.count_pending_embeddings(embedder.spec.signature)
            raise StoreFull(
                f"disk full: embedding stopped with {committed.done:,} chunks embedded and "
                f"kept and {left:,} still without a vector; free some space and run embed "
                f"again ({exc.__cause__ or exc})"
            ) from exc

    def build_indexes(self) -> dict[str, float]:
        """Bring the search indexes up to date with the store and write their files beside
        it, so that the next search, in this process or another, starts at once rather than
        building them (the first search of a 100k-chunk store otherwise takes half a
        minute). Returns the seconds each took: ``keyword``, and ``vectors`` where the
        vector leg can run. Done by ``stratamem ingest`` and ``stratamem embed``."""
        self._owner_only("build indexes")
        took: dict[str, float] = {}
        start = time.perf_counter()
        sparse_index(self.store).persist_now()
        took["keyword"] = time.perf_counter() - start
        vectors = self.vectors
        if vectors is not None and vectors.status() is None:
            start = time.perf_counter()
            vectors.build()
            took["vectors"] = time.perf_counter() - start
        return took

    def reindex(self, *, progress: Callable[[EmbedProgress], None] | None = None) -> EmbedReport:
        """Switch the store's vectors to the configured model, re-embedding every chunk."""
        self._owner_only("reindex")
        embedder = self._require_embedder()
        report = reindex(self.store, embedder, progress=progress)
        with self.store.transaction():
            remembering.embed_facts(self.store, embedder)
        return report

    def set_keyword_tokenizer(self, name: str) -> bool:
        """Index every chunk's text again with the keyword tokenizer ``name``: ``stemmed``
        (the default: Porter stems, so "running" finds "runs") or ``plain`` (words as
        written). The choice is recorded with the full-text index, and the in-process BM25
        index (and its file) is rebuilt from it. False where the store uses it already."""
        self._owner_only("change the keyword tokenizer")
        changed = self.store.set_keyword_tokenizer(name)
        if changed:
            sparse_index(self.store).persist_now()
        return changed

    def keyword_tokenizer(self) -> str:
        """The keyword tokenizer the store's full-text index uses: ``stemmed`` or ``plain``."""
        return self.store.keyword_tokenizer()

    def sources(self) -> list[Source]:
        return self.store.sources()

    def source(self, ref: str) -> Source:
        """A source by id or exact scope; :class:`NotFoundError` if there is none."""
        return self.store.resolve_source(ref)

    def pending_embeddings(self) -> int:
        """How many chunks (of unlocked sources) have no vector of the configured embedder
        yet; 0 without an embedder."""
        embedder = self.embedder
        if embedder is None:
            return 0
        return self.store.count_pending_embeddings(embedder.spec.signature)

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
            "pending": self.pending_embeddings(),
            "index": "hnsw" if count >= threshold else "exact",
            "status": (vector_status(self.store, embedder) or "ok")
            if embedder
            else "off: no embedder configured",
        }
        jobs = self.store.jobs.counts(kind=SEAL_KIND)
        return {
            "vectors": vectors,
            "keyword": {"tokenizer": self.keyword_tokenizer()},
            "trees": {
                "trees": len(self.trees()),
                "seal_jobs_pending": jobs.get("pending", 0) + jobs.get("running", 0),
                "seal_jobs_failed": jobs.get("failed", 0),
            },
            "facts": len(self.store.facts(limit=1_000_000_000)),
            "rollups": len(self.store.rollups(limit=1_000_000_000)),
            "rerank": self.reranker.name if self.reranker is not None else None,
        }

    def get(self, node_id: str) -> RetrievalHit:
        """One node (a chunk or a summary) by id, with its entities and provenance. An
        item's id reads as the item as it is now, and a chunk id an item had before an edit
        or a removal as that version (see ``docs/memory.md``)."""
        found = self.nodes([node_id])
        if not found:
            raise NotFoundError(f"no node with id {node_id!r}")
        return found[0]

    def nodes(self, node_ids: Sequence[str]) -> list[RetrievalHit]:
        """Chunks and summaries by id, in the order asked (unknown ids left out), in two
        batched reads whatever their number."""
        return primitives.nodes(self.store, node_ids)

    def search_entities(
        self, query: str, *, kinds: Sequence[str] = (), limit: int = 5
    ) -> list[EntityMatch]:
        return search_entities(self.store, query, kinds=kinds, limit=limit)

    def related(self, entity_id: str, *, limit: int = 10) -> list[tuple[str, float]]:
        """Entities most often mentioned together with ``entity_id``."""
        return neighbours(self.store, entity_id, limit=limit)

    # -- facts -------------------------------------------------------------------------------

    def remember(
        self,
        subject: str,
        predicate: str,
        object: str,
        *,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        evidence: Sequence[str] = (),
        source: str | None = None,
        confidence: float = 1.0,
        origin: Origin = "asserted",
        many: bool = False,
        now: datetime | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> FactWrite:
        """State that ``subject``'s ``predicate`` is ``object`` from ``valid_from`` (None: as
        far back as known) until ``valid_to`` (None: until said otherwise). ``subject`` is an
        entity id (``person:carol diaz``); ``object`` an entity id or any literal. The fact
        belongs to the source of its ``evidence`` (node ids or item ids), else to ``source``
        (default ``facts:asserted``). A new value closes the old one at ``valid_from``,
        keeping it in the history; without ``valid_from`` it starts at the time of its latest
        evidence, else now. The same value again changes nothing. ``many=True``: the
        predicate holds many values at once (likes, observed), and a new one adds to the
        others. ``user``, ``agent`` and ``session`` put the fact in that identity's memory
        (``facts/user:maya``, or the evidence's source, which must be of it); the subject
        may be ``user:maya`` too (see ``docs/memory.md``)."""
        self._owner_only("remember facts")
        said = remembering.statement(
            subject,
            predicate,
            object,
            valid_from=valid_from,
            valid_to=valid_to,
            evidence=evidence,
            confidence=confidence,
            origin=origin,
            many=many,
        )
        return remembering.remember(
            self.store,
            said,
            source=source,
            user=user,
            agent=agent,
            session=session,
            now=now,
            embedder=self._write_embedder(),
        )

    def retract(self, fact: str, *, now: datetime | None = None) -> FactWrite:
        """A correction: the fact (by id) was never true. It stays in the history."""
        self._owner_only("retract facts")
        return remembering.unsay(self.store, fact, now=now)

    def recall(
        self,
        subject: str | None = None,
        *,
        predicate: str | None = None,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        limit: int = 1000,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[Fact]:
        """The facts true at ``as_of`` (None: now), as the store knew them at ``known_at``
        (None: now), of the sources the reader may read (and of the memory of ``user``,
        ``agent`` and ``session``, where given)."""
        return remembering.recall(
            self.store,
            subject=subject,
            predicate=predicate,
            valid_at=as_of,
            known_at=known_at,
            limit=limit,
            user=user,
            agent=agent,
            session=session,
        )

    def search_facts(
        self,
        query: str,
        *,
        subject: str | None = None,
        sources: Sequence[str] = (),
        as_of: datetime | None = None,
        limit: int = 10,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[FactHit]:
        """The facts that best match ``query`` (BM25 over what each says), true at ``as_of``
        (None: now), of ``sources`` (ids or scopes; none: every source the reader may read),
        ranked among those facts alone."""
        return search_facts(
            self.store,
            query,
            subject=subject,
            sources=sources,
            valid_at=as_of,
            limit=limit,
            embedder=self._query_embedder(query),
            user=user,
            agent=agent,
            session=session,
        )

    def query_facts(
        self,
        query: str,
        *,
        subject: str | None = None,
        sources: Sequence[str] = (),
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        limit: int = 10,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """The facts that best match ``query``, ranked as :meth:`search_facts` ranks them
        (true at ``as_of``, as known at ``known_at``; None: now), as hits of kind ``fact``:
        what the fact says, its validity as the time range, its source, and in ``explain``
        its origin, confidence, transaction times and evidence with their citations (see
        ``docs/memory.md``). ``total`` counts the facts that matched."""
        from stratamem.memory.hits import fact_hits
        from stratamem.memory.search import match_facts

        with self.store.read_snapshot():
            found = match_facts(
                self.store,
                query,
                subject=subject,
                sources=sources,
                valid_at=as_of,
                known_at=known_at,
                limit=limit,
                embedder=self._query_embedder(query),
                user=user,
                agent=agent,
                session=session,
            )
            return QueryResponse(hits=tuple(fact_hits(self.store, found.hits)), total=found.total)

    def fact_history(
        self,
        subject: str,
        predicate: str,
        *,
        known_at: datetime | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[Fact]:
        """Every value ``subject``'s ``predicate`` had, oldest first (with ``known_at``, as
        believed then; without, also the rows since corrected or replaced)."""
        return remembering.timeline(
            self.store,
            subject,
            predicate,
            known_at=known_at,
            user=user,
            agent=agent,
            session=session,
        )

    def extract_facts(
        self,
        sources: Sequence[str] = (),
        *,
        endpoint: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 2,
        batch_size: int = 8,
        redo: bool = False,
        pending: bool = False,
        progress: Callable[[ExtractProgress], None] | None = None,
    ) -> ExtractReport:
        """Ask a model behind an OpenAI-compatible ``endpoint`` what the chunks of ``sources``
        (ids or scopes; all when none) state, and write its answers as facts of origin
        ``model`` (see ``docs/memory.md``). Queues one durable job per source, then runs every
        ready one; ``pending`` only runs those already queued. Only chunks not extracted yet
        are sent (``redo``: all of them again); a locked source never is. ``endpoint`` and
        ``model`` default to those set by :meth:`set_extraction`; ``api_key`` to
        ``STRATAMEM_EXTRACT_API_KEY``, else ``OPENAI_API_KEY``. The report says what was
        written, skipped (with reasons) and retried, and which jobs failed."""
        from stratamem.memory import extract as extracting

        self._owner_only("extract facts")
        if self._open_args["unlock"]:
            raise LockError("a memory opened with unlocked sources cannot extract facts")
        chosen = (endpoint, model) if endpoint and model else extracting.configured(self.store)
        if chosen is None:
            raise ValueError(
                "no extraction endpoint: give an endpoint and a model, or set them with "
                "stratamem extract --enable --endpoint URL --model NAME"
            )
        config = extracting.ExtractConfig(
            endpoint=endpoint or chosen[0],
            model=model or chosen[1],
            timeout=timeout,
            retries=retries,
            batch_size=batch_size,
        )
        with extracting.Extractor(
            self.store,
            config,
            api_key=api_key or extracting.api_key_from_environment(),
            embedder=self._write_embedder(),
        ) as extractor:
            if not pending:
                extractor.enqueue(sources, redo=redo)
            return extractor.run_pending(progress=progress)

    def set_extraction(self, endpoint: str | None, model: str | None = None) -> None:
        """Extract facts after every ingest, from the sources it changed, with ``model``
        behind ``endpoint``; ``endpoint`` None turns that off. The API key is never stored."""
        from stratamem.memory import extract as extracting

        self._owner_only("configure extraction")
        extracting.configure(self.store, endpoint, model)

    def extraction(self) -> tuple[str, str] | None:
        """The (endpoint, model) ingest extracts facts with, or None when it does not."""
        from stratamem.memory import extract as extracting

        return extracting.configured(self.store)

    def _extract_after_ingest(self, report: IngestReport) -> None:
        """When extraction is on, queue the changed sources' jobs and run the ready ones; a
        failure is logged and leaves its job queued (``stratamem extract --pending``)."""
        from stratamem.memory import extract as extracting

        if self._open_args["unlock"] or extracting.configured(self.store) is None:
            return
        changed = [s.source_id for s in report.sources if s.error is None and s.added]
        try:
            if changed:
                self.extract_facts(changed)
            else:
                self.extract_facts(pending=True)
        except (StratamemError, ValueError) as exc:
            log.warning("extracting facts after ingest failed: %s", exc)

    def rollups(self, subject: str | None = None, *, limit: int = 100) -> list[Rollup]:
        """The rollups (profile cards written by consolidation) the reader may see, best score
        first: of ``subject`` (an entity id) only, or of every subject."""
        wanted = None if subject is None else remembering.entity_id(subject)
        return self.store.rollups(subject=wanted, limit=limit)

    def consolidate(
        self,
        *,
        now: datetime | None = None,
        min_facts: int | None = None,
        min_score: float | None = None,
        progress: Callable[[ConsolidationProgress], None] | None = None,
    ) -> ConsolidationReport:
        """Score the facts true now and bring the rollups up to date: write a profile card for
        each subject with ``min_facts`` current facts or a fact scoring ``min_score``, keep the
        unchanged ones, drop the rest; runs the pending after-ingest job too. The owner only,
        on a store opened without unlocking (see ``docs/memory.md``)."""
        self._owner_only("consolidate")
        if self._open_args["unlock"]:
            raise LockError(
                "consolidation reads as if nothing were unlocked: open the store without "
                "unlocking (no unlock= or --unlock) to consolidate"
            )
        return consolidating.run_pass(
            self.store, now=now, min_facts=min_facts, min_score=min_score, progress=progress
        )

    def consolidate_after_ingest(self, on: bool | None = None) -> bool:
        """Whether :meth:`ingest` queues and runs a consolidation pass after it; ``on`` sets it
        (kept in the store)."""
        if on is not None:
            self._owner_only("configure consolidation")
            consolidating.set_after_ingest(self.store, on)
        return consolidating.after_ingest(self.store)

    def forget(self, source: str) -> int:
        """Remove a source (by id or scope) and everything derived from it, leaving no copy
        of its text behind: the database rewrites its full-text segments and empties its WAL
        (see the SQLite store's ``scrub``), and the index files beside it are rewritten without the
        removed rows, or removed."""
        self._owner_only("forget sources")
        found = self.store.resolve_source(source)
        self._ready_indexes()
        try:
            removed = self.store.delete_source(found.id)
        except StoreFull:
            # The source is gone and only the scrub is left: the index files still go.
            self._rewrite_indexes()
            raise
        self._rewrite_indexes()
        return removed


def _ids(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """One id or several as a tuple (none for None)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


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
