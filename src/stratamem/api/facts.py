"""``mem.facts``: bitemporal facts (stated, extracted by a model, read as of a time) and the
rollups consolidation writes from them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stratamem.api._core import Facet, When, check_sources, when
from stratamem.errors import LockError, StratamemError
from stratamem.memory import consolidate as consolidating
from stratamem.memory import remember as remembering
from stratamem.memory.consolidate import ConsolidationProgress, ConsolidationReport
from stratamem.memory.search import FactHit, search_facts
from stratamem.retrieval.relevance import Calibration
from stratamem.store.facts import Fact, FactWrite, Origin
from stratamem.store.rollups import Rollup
from stratamem.types import QueryResponse

if TYPE_CHECKING:
    from stratamem.ingest.pipeline import IngestReport
    from stratamem.memory.extract import ExtractProgress, ExtractReport, FactReader

__all__ = ["Facts"]

log = logging.getLogger(__name__)


class Facts(Facet):
    """State, correct, read and search facts; extract them with a model; consolidate them
    into rollups (see ``docs/memory.md``)."""

    def remember(
        self,
        subject: str,
        predicate: str,
        object: str,
        *,
        valid_from: When | None = None,
        valid_to: When | None = None,
        evidence: Sequence[str] = (),
        source: str | None = None,
        confidence: float = 1.0,
        origin: Origin = "asserted",
        many: bool = False,
        now: When | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
        join: bool = False,
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
        may be ``user:maya`` too (see ``docs/memory.md``). A source a principal made is
        refused unless ``join=True``."""
        self._owner_only("remember facts")
        now_at = when(now, "now")
        said = remembering.statement(
            subject,
            predicate,
            object,
            valid_from=when(valid_from, "valid_from", now=now_at),
            valid_to=when(valid_to, "valid_to", now=now_at),
            evidence=evidence,
            confidence=confidence,
            origin=origin,
            many=many,
        )
        return remembering.remember(
            self._store,
            said,
            source=source,
            user=user,
            agent=agent,
            session=session,
            now=now_at,
            embedder=self._memory._write_embedder(),
            join=join,
        )

    def retract(self, fact_id: str, *, now: When | None = None) -> FactWrite:
        """A correction: the fact (by id) was never true. It stays in the history."""
        self._owner_only("retract facts")
        return remembering.unsay(self._store, fact_id, now=when(now, "now"))

    def recall(
        self,
        subject: str | None = None,
        *,
        predicate: str | None = None,
        as_of: When | None = None,
        known_at: When | None = None,
        limit: int = 1000,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[Fact]:
        """The facts true at ``as_of`` (None: now), as the store knew them at ``known_at``
        (None: now), of the sources the reader may read (and of the memory of ``user``,
        ``agent`` and ``session``, where given)."""
        return remembering.recall(
            self._store,
            subject=subject,
            predicate=predicate,
            valid_at=when(as_of, "as_of"),
            known_at=when(known_at, "known_at"),
            limit=limit,
            user=user,
            agent=agent,
            session=session,
        )

    def history(
        self,
        subject: str,
        predicate: str,
        *,
        known_at: When | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[Fact]:
        """Every value ``subject``'s ``predicate`` had, oldest first (with ``known_at``, as
        believed then; without, also the rows since corrected or replaced)."""
        return remembering.timeline(
            self._store,
            subject,
            predicate,
            known_at=when(known_at, "known_at"),
            user=user,
            agent=agent,
            session=session,
        )

    def about(self, subject: str, *, limit: int = 10_000) -> list[Fact]:
        """Every row of every fact whose subject is ``subject``'s entity (any id of it: see
        ``docs/memory.md``), of the sources the reader may read: the values true now, those
        closed, replaced or corrected (``expired_at`` set), all predicates, ordered by
        predicate, then valid time, then when recorded; at most ``limit`` rows."""
        store = self._store
        members = store.entity_resolution().members(remembering.entity_id(subject))
        rows = [
            row
            for member in members
            for row in store.facts(subject=member, believed_only=False, limit=max(1, limit))
        ]
        rows.sort(
            key=lambda r: (
                r.predicate,
                r.valid_from is not None,
                r.valid_from,
                r.recorded_at,
                r.id,
            )
        )
        return rows[: max(1, limit)]

    def search(
        self,
        query: str,
        *,
        subject: str | None = None,
        sources: Sequence[str] = (),
        as_of: When | None = None,
        limit: int = 10,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
        min_relevance: float | None = None,
    ) -> list[FactHit]:
        """The facts that best match ``query`` (BM25 over what each says), true at ``as_of``
        (None: now), of ``sources`` (ids or scopes; none: every source the reader may read;
        one that names no source it may see is a :class:`NotFoundError`), ranked among those
        facts alone. Each hit carries its ``relevance`` (0 to 1, comparable across
        queries); ``min_relevance`` drops those below it."""
        valid_at = when(as_of, "as_of")
        check_sources(self._store, sources)
        return search_facts(
            self._store,
            query,
            subject=subject,
            sources=sources,
            valid_at=valid_at,
            limit=limit,
            embedder=self._memory._query_embedder(query),
            user=user,
            agent=agent,
            session=session,
            min_relevance=min_relevance,
            calibration=self._calibration(),
        )

    def _calibration(self) -> Calibration:
        return Calibration.load(self._memory.config.calibration)

    def query(
        self,
        query: str,
        *,
        subject: str | None = None,
        sources: Sequence[str] = (),
        as_of: When | None = None,
        known_at: When | None = None,
        limit: int = 10,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
        min_relevance: float | None = None,
    ) -> QueryResponse:
        """The facts that best match ``query``, ranked as :meth:`search` ranks them (true at
        ``as_of``, as known at ``known_at``; None: now), as hits of kind ``fact``: what the
        fact says, its validity as the time range, its source, and in ``explain`` its origin,
        confidence, transaction times and evidence with their citations (see
        ``docs/memory.md``). ``total`` counts the facts that matched. Each hit carries its
        ``relevance``; ``min_relevance`` drops those below it and ``nothing_relevant`` says
        whether any reached it (or the default threshold: see ``docs/search.md``)."""
        from stratamem.memory.hits import fact_hits
        from stratamem.memory.search import match_facts

        valid_at, known = when(as_of, "as_of"), when(known_at, "known_at")
        store = self._store
        with store.read_snapshot():
            check_sources(store, sources)
            found = match_facts(
                store,
                query,
                subject=subject,
                sources=sources,
                valid_at=valid_at,
                known_at=known,
                limit=limit,
                embedder=self._memory._query_embedder(query),
                user=user,
                agent=agent,
                session=session,
                min_relevance=min_relevance,
                calibration=self._calibration(),
            )
            return QueryResponse(
                hits=tuple(fact_hits(store, found.hits)),
                total=found.total,
                nothing_relevant=found.nothing_relevant,
            )

    def extract(
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
        reader: FactReader | None = None,
    ) -> ExtractReport:
        """Ask a model behind an OpenAI-compatible ``endpoint`` what the chunks of ``sources``
        (ids or scopes; all when none) state, and write its answers as facts of origin
        ``model`` (see ``docs/memory.md``). Queues one durable job per source, then runs every
        ready one; ``pending`` only runs those already queued. Only chunks not extracted yet
        are sent (``redo``: all of them again); a locked source never is. ``endpoint`` and
        ``model`` default to those set by :meth:`set_extraction`; ``api_key`` to
        ``STRATAMEM_EXTRACT_API_KEY``, else ``OPENAI_API_KEY``. The model is shown the facts held
        about what each batch mentions and answers with decisions (add, update, retract,
        none). ``reader`` is a caller other than the owner (a principal, on a server): the
        model is shown only the facts it reads, may change only those, and only the jobs of
        ``sources`` run (none when none are named). The report says what was decided,
        written, skipped (with reasons) and retried, and which jobs failed."""
        from stratamem.memory import extract as extracting

        self._owner_only("extract facts")
        if self._memory._unlocked:
            raise LockError("a memory opened with unlocked sources cannot extract facts")
        chosen = (endpoint, model) if endpoint and model else self.extraction_required()
        config = extracting.ExtractConfig(
            endpoint=endpoint or chosen[0],
            model=model or chosen[1],
            timeout=timeout,
            retries=retries,
            batch_size=batch_size,
        )
        with extracting.Extractor(
            self._store,
            config,
            api_key=api_key or extracting.api_key_from_environment(),
            embedder=self._memory._write_embedder(),
            reader=reader,
        ) as extractor:
            # A caller other than the owner names the sources it reads: none named is none
            # run, never every source of the store.
            if pending or (reader is not None and not sources):
                queued = []
            else:
                queued = extractor.enqueue(sources, redo=redo)
            only = None if reader is None else [s.id for s in queued]
            return extractor.run_pending(progress=progress, only=only)

    def set_extraction(self, endpoint: str | None, model: str | None = None) -> None:
        """Extract facts after every ingest, from the sources it changed, with ``model``
        behind ``endpoint``; ``endpoint`` None turns that off. The API key is never stored."""
        from stratamem.memory import extract as extracting

        self._owner_only("configure extraction")
        extracting.configure(self._store, endpoint, model)

    def extraction_required(self) -> tuple[str, str]:
        """The (endpoint, model) set by :meth:`set_extraction`; ``ValueError`` saying how to
        set them when there are none."""
        from stratamem.memory import extract as extracting

        chosen = extracting.configured(self._store)
        if chosen is None:
            raise ValueError(
                "no extraction endpoint: give an endpoint and a model, or set them with "
                "stratamem extract --enable --endpoint URL --model NAME"
            )
        return chosen

    def extraction(self) -> tuple[str, str] | None:
        """The (endpoint, model) ingest extracts facts with, or None when it does not."""
        from stratamem.memory import extract as extracting

        return extracting.configured(self._store)

    def _after_ingest(self, report: IngestReport) -> None:
        """When extraction is on, queue the changed sources' jobs and run the ready ones; a
        failure is logged and leaves its job queued (``stratamem extract --pending``)."""
        from stratamem.memory import extract as extracting

        if self._memory._unlocked or extracting.configured(self._store) is None:
            return
        changed = [s.source_id for s in report.sources if s.error is None and s.added]
        try:
            if changed:
                self.extract(changed)
            else:
                self.extract(pending=True)
        except (StratamemError, ValueError) as exc:
            log.warning("extracting facts after ingest failed: %s", exc)

    def rollups(self, subject: str | None = None, *, limit: int = 100) -> list[Rollup]:
        """The rollups (profile cards written by consolidation) the reader may see, best score
        first: of ``subject`` (an entity id) only, or of every subject."""
        wanted = None if subject is None else remembering.entity_id(subject)
        return self._store.rollups(subject=wanted, limit=limit)

    def consolidate(
        self,
        *,
        now: When | None = None,
        min_facts: int | None = None,
        min_score: float | None = None,
        progress: Callable[[ConsolidationProgress], None] | None = None,
    ) -> ConsolidationReport:
        """Score the facts true now and bring the rollups up to date: write a profile card for
        each subject with ``min_facts`` current facts or a fact scoring ``min_score``, keep the
        unchanged ones, drop the rest; runs the pending after-ingest job too. The owner only,
        on a store opened without unlocking (see ``docs/memory.md``)."""
        self._owner_only("consolidate")
        if self._memory._unlocked:
            raise LockError(
                "consolidation reads as if nothing were unlocked: open the store without "
                "unlocking (no unlock= or --unlock) to consolidate"
            )
        return consolidating.run_pass(
            self._store,
            now=when(now, "now"),
            min_facts=min_facts,
            min_score=min_score,
            progress=progress,
        )

    def consolidate_after_ingest(self, on: bool | None = None) -> bool:
        """Whether ``mem.ingest`` queues and runs a consolidation pass after it; ``on`` sets
        it (kept in the store)."""
        if on is not None:
            self._owner_only("configure consolidation")
            consolidating.set_after_ingest(self._store, on)
        return consolidating.after_ingest(self._store)
