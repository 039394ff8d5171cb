"""``mem.indexes``: the vectors, the keyword index and the files beside the store that hold
them, and the fusion weights tuned for this store."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from stratamem.api._core import Facet
from stratamem.embed.indexing import (
    ACTIVE_MODEL,
    EmbedProgress,
    EmbedReport,
    embed_pending,
    reindex,
)
from stratamem.errors import StoreFull
from stratamem.memory import remember as remembering
from stratamem.retrieval.legs.keyword import sparse_index

__all__ = ["Indexes"]


class Indexes(Facet):
    """Embed, re-embed with another model, build the index files, choose the keyword
    tokenizer, keep tuned weights (the owner only, but for the reads)."""

    def embed(
        self,
        *,
        progress: Callable[[EmbedProgress], None] | None = None,
        sources: Sequence[str] | None = None,
    ) -> EmbedReport:
        """Embed every chunk that has no vector yet with the configured model (of these
        ``sources`` only, by id, where given). Each batch commits on its own: a disk that
        fills up keeps what was embedded before it (:class:`~stratamem.errors.StoreFull`
        says how much, and how much is left)."""
        self._owner_only("embed")
        embedder = self._memory._require_embedder()
        committed = EmbedProgress()  # as of the last batch committed

        def track(state: EmbedProgress) -> None:
            committed.done = state.done
            if progress is not None:
                progress(state)

        adopting = self._store.get_setting(ACTIVE_MODEL) is None
        try:
            report = embed_pending(self._store, embedder, progress=track, sources=sources)
            if adopting:
                # The facts written before the store had a model get the vectors those
                # written after it get as they are written.
                with self._store.transaction():
                    remembering.embed_facts(self._store, embedder)
            return report
        except StoreFull as exc:
            left = self._store.count_pending_embeddings(embedder.spec.signature)
            raise StoreFull(
                f"disk full: embedding stopped with {committed.done:,} chunks embedded and "
                f"kept and {left:,} still without a vector; free some space and run embed "
                f"again ({exc.__cause__ or exc})"
            ) from exc

    def reindex(self, *, progress: Callable[[EmbedProgress], None] | None = None) -> EmbedReport:
        """Switch the store's vectors to the configured model, re-embedding every chunk."""
        self._owner_only("reindex")
        embedder = self._memory._require_embedder()
        report = reindex(self._store, embedder, progress=progress)
        with self._store.transaction():
            remembering.embed_facts(self._store, embedder)
        return report

    def build(self) -> dict[str, float]:
        """Bring the search indexes up to date with the store and write their files beside
        it, so that the next search, in this process or another, starts at once rather than
        building them (the first search of a 100k-chunk store otherwise takes half a
        minute). Returns the seconds each took: ``keyword``, and ``vectors`` where the
        vector leg can run. Done by ``stratamem ingest`` and ``stratamem embed``."""
        self._owner_only("build indexes")
        took: dict[str, float] = {}
        start = time.perf_counter()
        sparse_index(self._store).persist_now()
        took["keyword"] = time.perf_counter() - start
        vectors = self._memory.vectors
        if vectors is not None and vectors.status() is None:
            start = time.perf_counter()
            vectors.build()
            took["vectors"] = time.perf_counter() - start
        return took

    def pending(self, *, sources: Sequence[str] | None = None) -> int:
        """How many chunks (of unlocked sources; of these ``sources`` only, by id, where
        given) have no vector of the configured embedder yet; 0 without an embedder."""
        embedder = self._memory.embedder
        if embedder is None:
            return 0
        signature = embedder.spec.signature
        if sources is None:
            return self._store.count_pending_embeddings(signature)
        return sum(self._store.count_pending_embeddings(signature, source=s) for s in set(sources))

    def set_keyword_tokenizer(self, name: str) -> bool:
        """Index every chunk's text again with the keyword tokenizer ``name``: ``stemmed``
        (the default: Porter stems, so "running" finds "runs") or ``plain`` (words as
        written). The choice is recorded with the full-text index, and the in-process BM25
        index (and its file) is rebuilt from it. False where the store uses it already."""
        self._owner_only("change the keyword tokenizer")
        changed = self._store.set_keyword_tokenizer(name)
        if changed:
            sparse_index(self._store).persist_now()
        return changed

    def keyword_tokenizer(self) -> str:
        """The keyword tokenizer the store's full-text index uses: ``stemmed`` or ``plain``."""
        return self._store.keyword_tokenizer()

    def save_tuned_weights(self, record: Mapping[str, Any]) -> None:
        """Keep tuned fusion weights in the store (``record``: ``weights`` and how they were
        chosen — dataset, metric, split, score); every later search that is not given weights
        or a profile uses them."""
        from stratamem.config import TUNED_KEY, tuned_layer

        self._owner_only("save tuned weights")
        raw = json.dumps(dict(record), sort_keys=True)
        if not tuned_layer(raw)[0]:
            raise ValueError("tuned weights need a 'weights' mapping of leg → weight")
        with self._store.transaction():
            self._store.set_setting(TUNED_KEY, raw)
        memory = self._memory
        memory.config = replace(memory.config, weights=json.loads(raw)["weights"])
