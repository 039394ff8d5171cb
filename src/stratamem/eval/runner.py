"""Running retrieval modes over an evaluation dataset with the real pipeline.

The dataset is ingested into a store of its own (one source per group, so a LoCoMo question
is answered only from its own conversation; one chunk per document, cited by the document's
id), embedded with the configured model, and kept: a later run over the same dataset and
model reuses it. Each mode is a configuration of :meth:`stratamem.Memory.search`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from stratamem import Memory
from stratamem.config import SearchConfig
from stratamem.eval.datasets import HELDOUT, TUNE, Dataset, Doc, Query
from stratamem.eval.report import Baseline, EvalResult, run_retriever
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.model import ReadContext, Record, SourceStream, to_utc
from stratamem.types import SourceKind

MODES = ("keyword", "vector", "hybrid", "hybrid+rerank")
# Older names of modes, still accepted: the keyword leg was scored as ``fts``.
MODE_ALIASES = {"fts": "keyword"}
# Modes that run one leg on its own.
SINGLE_LEGS = ("keyword", "vector")
# One chunk per document (or dialog turn): the qrels judge documents, and the model truncates
# long ones anyway.
WHOLE_DOCS = ChunkingConfig(
    doc_target=10**8, doc_min=1, doc_max=10**9, chat_max_messages=1, chat_max_chars=10**8
)


class DatasetConnector:
    """Reads a :class:`Dataset`'s documents as sources: one per group (or one in all)."""

    name = "dataset"

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        # Conversations are chats (their turns are neighbours); BEIR documents stand alone.
        self.kind = SourceKind.CHAT if dataset.kind == "locomo" else SourceKind.RECORD

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        for group, ids in sorted(
            self.dataset.doc_ids_by_group().items(), key=lambda item: str(item[0])
        ):
            scope = scope_of(self.dataset, group)
            wanted = set(ids)
            docs = [d for d in self.dataset.docs if d.id in wanted]
            yield SourceStream(
                scope=scope,
                kind=self.kind,
                platform="eval",
                location=str(path),
                records=(_record(d, chat=self.kind is SourceKind.CHAT) for d in docs),
                title=scope,
                # A benchmark corpus is read whole every time, in its own order, and two of
                # its documents may hold the same text: it replaces, it does not merge.
                merge=False,
            )


def scope_of(dataset: Dataset, group: str | None) -> str:
    return f"eval:{dataset.name}" if group is None else f"eval:{dataset.name}/{group}"


def _record(doc: Doc, *, chat: bool = False) -> Record:
    stamp = doc.meta.get("timestamp")
    when = None
    if isinstance(stamp, str) and stamp:
        try:
            when = to_utc(datetime.fromisoformat(stamp.replace("Z", "+00:00")))
        except ValueError:
            when = None
    speaker = doc.meta.get("speaker")
    return Record(
        text=doc.text,
        ref=doc.id,
        time=when,
        # A LoCoMo turn's text already names its speaker; as a chat author it would be
        # prefixed a second time.
        author=speaker if isinstance(speaker, str) and not chat else None,
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
    if memory.stats()["chunks"] < len(dataset.docs):
        say(f"ingesting {len(dataset.docs):,} documents")
        memory.ingest(
            Path(dataset.name),
            connector=DatasetConnector(dataset),
            chunking=WHOLE_DOCS,
            parallel=False,
        )
    if embed and memory.embedder is not None:
        pending = memory.indexes.pending()
        if pending:
            say(f"embedding {pending:,} documents with {memory.embedder.spec.name}")
        memory.indexes.embed()


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
        mode = canonical_mode(self.mode)
        single_leg = mode in SINGLE_LEGS
        config = self.config or self.memory.config
        if single_leg:
            # A leg on its own: no context, expansion or diversification, only the leg's order.
            config = replace(config, expand_seeds=0, context_share=0.0)
        response = self.memory.search(
            query.text,
            sources=sources,
            limit=k,
            mode=mode if single_leg else "hybrid",
            rerank=mode == "hybrid+rerank",
            config=config,
            diversify=not single_leg,
        )
        ranked: dict[str, None] = {}
        for hit in response.hits:
            ranked.setdefault(hit.source_ref or hit.node_id)
        return list(ranked)


def canonical_mode(mode: str) -> str:
    """A mode's current name (``fts`` → ``keyword``); other names are returned as given."""
    return MODE_ALIASES.get(mode, mode)


BASELINES: dict[str, list[Baseline]] = {
    "scifact": [
        Baseline("scifact", "BM25 (BEIR, multifield)", {"ndcg_cut_10": 0.665}, "BEIR paper"),
        Baseline("scifact", "BM25 (Pyserini flat)", {"ndcg_cut_10": 0.679}, "Pyserini"),
        Baseline("scifact", "all-MiniLM-L6-v2", {"ndcg_cut_10": 0.645}, "SBERT/MTEB"),
    ],
    "locomo": [
        Baseline(
            "locomo",
            "DRAGON (LoCoMo paper, dialog turns)",
            {"R@5": 0.567, "R@10": 0.662, "R@25": 0.767, "R@50": 0.827},
            "Maharana et al. 2024",
        ),
        Baseline(
            "locomo",
            "plain BM25 (about)",
            {"R@5": 0.52, "R@10": 0.60, "R@25": 0.70},
            "shared data README",
        ),
    ],
    "cranfield": [
        Baseline("cranfield", "plain BM25 (about)", {"ndcg_cut_10": 0.35}, "shared data README"),
    ],
}


def evaluate(
    dataset: Dataset,
    memory: Memory,
    modes: Sequence[str],
    *,
    split: str | None = None,
    k: int = 100,
    config: SearchConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[EvalResult]:
    """Prepare the store and score each mode on ``split`` (default: the test queries).

    ``modes`` are among :data:`MODES` (``fts`` is read as ``keyword``); each result is named
    by the mode's current name.
    """
    modes = [canonical_mode(m) for m in modes]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    prepare(memory, dataset, embed=any(m != "keyword" for m in modes), progress=progress)
    results = []
    for mode in modes:
        if mode == "hybrid+rerank" and memory.reranker is None:
            if progress:
                progress("hybrid+rerank skipped: no reranker configured")
            continue
        if progress:
            progress(f"{dataset.name}: {mode}")
        retriever = StoreRetriever(memory, dataset, mode, config)
        results.append(run_retriever(dataset, retriever, k=k, split=split, mode=mode))
    return results


@dataclass(frozen=True, slots=True)
class TuneResult:
    """Fusion weights fitted on the ``tune`` split, and what they score on ``heldout``."""

    dataset: str
    metric: str
    weights: dict[str, float]
    tune_score: float
    heldout: EvalResult
    default_heldout: EvalResult
    tried: int


def weight_grid(
    step: float = 0.1, graph: Sequence[float] = (0.0, 0.1, 0.2)
) -> list[dict[str, float]]:
    """Keyword/vector splits of what graph leaves, in ``step`` increments."""
    grid = []
    for g in graph:
        steps = int((1.0 - g) / step + 1e-9)
        for i in range(steps + 1):
            keyword = round(i * step, 4)
            grid.append({"keyword": keyword, "vector": round(1.0 - g - keyword, 4), "graph": g})
    return grid


def tune(
    dataset: Dataset,
    memory: Memory,
    *,
    metric: str | None = None,
    grid: Sequence[dict[str, float]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> TuneResult:
    """Grid-search the hybrid fusion weights on ``tune``; report them on ``heldout``.

    The two splits are a fixed 50/50 partition of the test queries, so the reported number
    never comes from a query the weights were chosen on.
    """
    metric = metric or ("recall_10" if dataset.kind.startswith("locomo") else "ndcg_cut_10")
    prepare(memory, dataset, progress=progress)
    base = memory.config
    best: tuple[float, dict[str, float]] | None = None
    candidates = list(grid or weight_grid())
    for number, weights in enumerate(candidates, 1):
        config = replace(base, weights=weights)
        result = run_retriever(
            dataset, StoreRetriever(memory, dataset, "hybrid", config), split=TUNE, mode="hybrid"
        )
        score = result.metrics[metric]
        if progress:
            progress(f"{number}/{len(candidates)} {weights} → {metric} {score:.4f}")
        if best is None or score > best[0]:
            best = (score, weights)
    assert best is not None
    tuned = replace(base, weights=best[1])
    heldout = run_retriever(
        dataset,
        StoreRetriever(memory, dataset, "hybrid", tuned),
        split=HELDOUT,
        mode="hybrid (tuned)",
    )
    default = run_retriever(
        dataset,
        StoreRetriever(memory, dataset, "hybrid", base),
        split=HELDOUT,
        mode=f"hybrid ({base.profile})",
    )
    return TuneResult(dataset.name, metric, best[1], best[0], heldout, default, len(candidates))
