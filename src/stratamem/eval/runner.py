"""Running retrieval modes over an evaluation dataset with the real pipeline.

The dataset is ingested into a store of its own (one source per group, so a LoCoMo question
is answered only from its own conversation; one chunk per document, cited by the document's
id), embedded with the configured model, and kept: a later run over the same dataset and
model reuses it. Each mode is a configuration of :meth:`stratamem.Memory.search`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from stratamem.api import Memory
from stratamem.config import SearchConfig
from stratamem.eval.datasets import Dataset, Doc, Query
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.model import ReadContext, Record, SourceStream, to_utc
from stratamem.types import SourceKind

MODES = ("fts", "vector", "hybrid", "hybrid+rerank")
# One chunk per document: the qrels judge documents, and the model truncates long ones anyway.
WHOLE_DOCS = ChunkingConfig(doc_target=10**8, doc_min=1, doc_max=10**9)


class DatasetConnector:
    """Reads a :class:`Dataset`'s documents as sources: one per group (or one in all)."""

    name = "dataset"

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        for group, ids in sorted(
            self.dataset.doc_ids_by_group().items(), key=lambda item: str(item[0])
        ):
            scope = scope_of(self.dataset, group)
            wanted = set(ids)
            docs = [d for d in self.dataset.docs if d.id in wanted]
            yield SourceStream(
                scope=scope,
                kind=SourceKind.RECORD,
                platform="eval",
                location=str(path),
                records=(_record(d) for d in docs),
                title=scope,
            )


def scope_of(dataset: Dataset, group: str | None) -> str:
    return f"eval:{dataset.name}" if group is None else f"eval:{dataset.name}/{group}"


def _record(doc: Doc) -> Record:
    ts = doc.meta.get("timestamp")
    when = None
    if isinstance(ts, str) and ts:
        try:
            when = to_utc(datetime.fromisoformat(ts.replace("Z", "+00:00")))
        except ValueError:
            when = None
    speaker = doc.meta.get("speaker")
    return Record(
        text=doc.text,
        ref=doc.id,
        ts=when,
        author=speaker if isinstance(speaker, str) else None,
        title=doc.title or None,
        doc=doc.id,
    )


def store_path(dataset: Dataset, cache_dir: Path) -> Path:
    digest = hashlib.sha256()
    for doc in dataset.docs:
        digest.update(doc.id.encode())
        digest.update(doc.text.encode())
    return cache_dir / f"{dataset.name}-{digest.hexdigest()[:12]}.db"


def prepare(
    memory: Memory,
    dataset: Dataset,
    *,
    embed: bool = True,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Ingest the dataset (a no-op when already there) and embed what has no vector."""
    say = progress or (lambda _: None)
    report = memory.store.stats()
    if report["chunks"] < len(dataset.docs):
        say(f"ingesting {len(dataset.docs):,} documents")
        memory.ingest(
            Path(dataset.name),
            connector=DatasetConnector(dataset),
            chunking=WHOLE_DOCS,
            parallel=False,
        )
    if embed and memory.embedder is not None:
        pending = memory.store.count_pending_embeddings(memory.embedder.spec.signature)
        if pending:
            say(f"embedding {pending:,} documents with {memory.embedder.spec.name}")
        memory.embed()


@dataclass(slots=True)
class StoreRetriever:
    """A :class:`stratamem.eval.datasets` retriever over a prepared store, for one mode."""

    memory: Memory
    dataset: Dataset
    mode: str
    config: SearchConfig | None = None

    def retrieve(self, query: Query, k: int) -> list[str]:
        group = self.dataset.group_of(query)
        sources = () if self.dataset.group_key is None else (scope_of(self.dataset, group),)
        search_mode = {"fts": "keyword", "vector": "vector"}.get(self.mode, "hybrid")
        config = self.config or self.memory.config
        if self.mode in ("fts", "vector"):
            # A leg on its own: no expansion, no diversification, nothing but the leg's order.
            config = replace(config, expand_seeds=0)
        response = self.memory.search(
            query.text,
            sources=sources,
            limit=k,
            mode=search_mode,
            rerank=self.mode == "hybrid+rerank",
            config=config,
            diversify=self.mode not in ("fts", "vector"),
        )
        ranked: dict[str, None] = {}
        for hit in response.hits:
            ranked.setdefault(hit.source_ref or hit.node_id)
        return list(ranked)
