"""Building summary trees: seal jobs from the durable queue, run level by level.

Every ingest that changes a source queues a ``seal:<tree id>`` job in the same transaction as
its chunks. :meth:`TreeBuilder.run_pending` works through the queue. For each tree it plans the
seals that are due (:mod:`stratamem.tree.plan`), reads their inputs, summarises them with no
transaction open, then commits each summary in a short transaction that claims exactly the
items it summarised; items appended meanwhile stay in the buffer for the next seal. Then it
climbs a level, up to ``max_depth``. Once the queue is done, the new summaries are embedded in
batches.

A process killed mid-job leaves its job running; the next run (a build, a flush, an ingest of
its source) takes it again at once when the dead holder ran on this host, or else once its lease has
expired. Since summary ids are a hash of their children and the plan depends only on what is
committed, the taker finishes the same tree an uninterrupted run would have built. A builder
whose job was taken from it (its lease ran out while it was stalled) stops at its next lease
renewal and finishes nothing.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from stratamem.config import TreeConfig
from stratamem.embed.base import Embedder
from stratamem.embed.indexing import ACTIVE_MODEL, embed_summaries
from stratamem.embed.tokens import estimate_tokens
from stratamem.errors import NotFoundError, StoreFull
from stratamem.store.base import Store
from stratamem.store.jobs import SEAL_JOB_PREFIX, SEAL_KIND, Job, seal_job_key
from stratamem.store.trees import BufferItem, SealRaced, summary_id_for
from stratamem.tree import plan
from stratamem.tree.extractive import ExtractiveSummarizer
from stratamem.tree.salience import leaf_score
from stratamem.tree.summarizer import Summarizer, SummaryItem
from stratamem.types import SourceKind, SummaryNode, Tree

log = logging.getLogger(__name__)

MAX_RACES = 8
LEASE_RENEWAL_S = 30.0


@dataclass(slots=True)
class SealProgress:
    trees: int = 0
    summaries: int = 0
    leaves: int = 0
    scope: str = ""


@dataclass(slots=True)
class SealReport:
    trees: int = 0
    summaries: int = 0
    leaves: int = 0
    by_level: dict[int, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    # Trees this run left alone because another claim holds their seal job (a process that
    # is sealing them, or a dead one on another host whose lease has not run out):
    # "<scope> (held by <host>/<pid>)".
    held: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "trees": self.trees,
            "summaries": self.summaries,
            "leaves": self.leaves,
            "by_level": {str(k): v for k, v in sorted(self.by_level.items())},
            "failed": list(self.failed),
            "held": list(self.held),
            "seconds": round(self.seconds, 3),
        }


class _LeaseLost(Exception):
    """The job was taken by another claim: stop sealing, and leave the job to its new holder."""


class TreeBuilder:
    """Seals the trees of one store. ``embedder`` embeds the new summaries, in batches once
    the queue is done, when the store's vectors are of its model (so summaries and chunks are
    always comparable)."""

    def __init__(
        self,
        store: Store,
        *,
        summarizer: Summarizer | None = None,
        embedder: Embedder | None = None,
        config: TreeConfig | None = None,
    ) -> None:
        self.store = store
        self.summarizer = summarizer or ExtractiveSummarizer()
        self.embedder = embedder
        self.config = config or TreeConfig()
        # Source id → kind, read once per run_pending: the sources listing costs a row per
        # source, and a run seals one tree per changed source.
        self._kinds: dict[str, SourceKind] | None = None

    # -- the queue -------------------------------------------------------------------------

    def enqueue(self, sources: Sequence[str] = (), *, force: bool = False) -> int:
        """Queue a seal for these sources (ids or scopes; all when empty); ``force`` also seals
        every partial level-0 buffer (a flush). Returns how many were queued."""
        wanted = set(sources)
        queued = 0
        for source in self.store.sources():
            if wanted and source.id not in wanted and source.scope not in wanted:
                continue
            if source.locked:
                continue  # nothing of it may be summarised until it is unlocked
            with self.store.transaction():
                tree_id = self.store.trees.ensure(source.id, source.scope)
                payload: dict[str, object] = {"tree_id": tree_id}
                if force:
                    payload["force"] = True
                self.store.jobs.enqueue(SEAL_KIND, seal_job_key(tree_id), payload)
            queued += 1
        return queued

    def run_pending(
        self,
        *,
        lease_s: float = 600.0,
        progress: Callable[[SealProgress], None] | None = None,
        trees: Collection[str] | None = None,
    ) -> SealReport:
        """Run every ready seal job (of these ``trees`` only, by id, where given: the report
        then says nothing of any other); a job that fails is retried later with backoff."""
        report = SealReport()
        state = SealProgress()
        started = time.perf_counter()

        def tick(scope: str) -> None:
            if progress is not None:
                state.scope = scope
                state.trees = report.trees
                state.summaries = report.summaries
                state.leaves = report.leaves
                progress(state)

        keys = None if trees is None else [seal_job_key(t) for t in sorted(set(trees))]
        try:
            for job in self._claims(lease_s, keys):
                tree = self.store.trees.get(str(job.payload.get("tree_id", "")))
                if tree is None:
                    self.store.jobs.done(job)
                    continue
                if self._kinds is None:
                    self._kinds = self.store.source_kinds()
                try:
                    with self.store.rebuildable_writes():
                        self.seal(
                            tree,
                            force=bool(job.payload.get("force")),
                            report=report,
                            job=job,
                            on_summary=functools.partial(tick, tree.scope),
                        )
                except _LeaseLost:
                    log.warning("sealing %s: the job was taken over by another run", tree.scope)
                    continue
                except Exception as exc:
                    log.warning("sealing %s failed: %s", tree.scope, exc)
                    self.store.jobs.fail(job, f"{type(exc).__name__}: {exc}")
                    report.failed.append(f"{tree.scope}: {exc}")
                    continue
                if not self.store.jobs.done(job):
                    log.warning("sealing %s: the job was taken over by another run", tree.scope)
                report.trees += 1
                tick(tree.scope)
        except StoreFull as exc:
            # No room to record a job's end or to claim the next: what was sealed is
            # committed, and every job not finished stays queued for the next run.
            log.warning("sealing stopped: %s", exc)
            report.failed.append(f"sealing stopped, the rest stays queued: {exc}")
            report.seconds = time.perf_counter() - started
            return report
        finally:
            self._kinds = None
        self._embed_new_summaries()
        report.held = self._held(keys)
        report.seconds = time.perf_counter() - started
        return report

    def _claims(self, lease_s: float, keys: Sequence[str] | None) -> Iterator[Job]:
        """The ready seal jobs, each claimed as the last one is done with: any, or those of
        ``keys`` in turn (a key asked for again while it ran is taken again)."""
        if keys is None:
            while (job := self.store.jobs.claim(lease_s=lease_s, kind=SEAL_KIND)) is not None:
                yield job
            return
        for key in keys:
            while (
                job := self.store.jobs.claim(lease_s=lease_s, kind=SEAL_KIND, key=key)
            ) is not None:
                yield job

    def _held(self, keys: Sequence[str] | None) -> list[str]:
        """The trees whose seal job (among ``keys``, where given) is running under another
        claim now that this run is done: what it left unsealed, whatever it sealed itself."""
        held = []
        for key, holder in self.store.jobs.held(kind=SEAL_KIND, keys=keys):
            tree = self.store.trees.get(key.removeprefix(SEAL_JOB_PREFIX))
            who = "/".join(holder.split("/")[:2]) or "another run"
            held.append(f"{tree.scope if tree is not None else key} (held by {who})")
        return held

    # -- sealing ---------------------------------------------------------------------------

    def seal(
        self,
        tree: Tree,
        *,
        force: bool = False,
        report: SealReport | None = None,
        job: Job | None = None,
        on_summary: Callable[[], None] | None = None,
    ) -> SealReport:
        """Seal everything that is due in ``tree``, climbing level by level; ``on_summary``
        is called after each summary is committed."""
        report = report if report is not None else SealReport()
        kind = self._kind_of(tree.source_id)
        if kind is None:
            return report
        documents = kind is SourceKind.DOCUMENT
        cfg = self.config
        level = 0
        races = 0
        touched = time.monotonic()
        while level < cfg.max_depth:
            if level == 0:
                if documents:
                    self._reopen_grown_documents(tree)
                items = self.store.trees.leaf_buffer(tree.source_id)
                if documents:
                    runs = plan.document_runs(items, budget=cfg.input_token_budget)
                else:
                    runs = plan.stream_runs(
                        items,
                        budget=cfg.input_token_budget,
                        flush_age=timedelta(days=cfg.flush_age_days),
                        newest=self.store.trees.newest_leaf_time(tree.source_id),
                        force=force,
                    )
            else:
                items = self.store.trees.summary_buffer(tree.id, level)
                runs = plan.fanout_runs(items, fanout=cfg.summary_fanout)
            raced = False
            for run in runs:
                if races > MAX_RACES:
                    raise RuntimeError(f"{tree.scope}: its buffers kept changing during sealing")
                try:
                    self._seal_run(tree, level, run, report)
                except SealRaced:
                    raced = True
                    races += 1
                    break
                if job is not None and time.monotonic() - touched > LEASE_RENEWAL_S:
                    if not self.store.jobs.touch(job):
                        raise _LeaseLost
                    touched = time.monotonic()
                if on_summary is not None:
                    on_summary()
            if raced:
                continue  # plan this level again from what is committed now
            if not runs and level > 0 and self.store.trees.highest_open_level(tree.id) <= level:
                break  # nothing sealed here and nothing waits above (a resumed seal may have)
            level += 1
        return report

    def _kind_of(self, source_id: str) -> SourceKind | None:
        """The kind of the source, or None when the store holds no such source. A source
        missing from the run's listing (made since it was read, or locked) is looked up."""
        if self._kinds is not None and source_id in self._kinds:
            return self._kinds[source_id]
        try:
            return self.store.resolve_source(source_id).kind
        except NotFoundError:
            return None

    def _reopen_grown_documents(self, tree: Tree) -> None:
        """A document with new unsealed leaves beside sealed ones changed: retire its sealed
        version so the whole document is summarised again as the next version."""
        with self.store.transaction():
            doomed = self.store.trees.grown_document_summaries(tree.id, tree.source_id)
            if doomed:
                self.store.trees.invalidate(doomed)

    def _seal_run(self, tree: Tree, level: int, run: list[BufferItem], report: SealReport) -> None:
        trees = self.store.trees
        ids = [item.id for item in run]
        entity_counts: Counter[str] = Counter()
        topic_counts: Counter[str] = Counter()
        scores: list[float] = []
        inputs: list[SummaryItem] = []
        if level == 0:
            leaves = self.store.chunks(ids)
            if len(leaves) != len(ids):
                raise SealRaced
            mentions = self.store.mentions_of(ids)
            for leaf in leaves:
                found = mentions.get(leaf.id, [])
                entity_counts.update(found)
                topic_counts.update(leaf.tags)
                topic_counts.update(e for e in found if e.startswith("topic:"))
                scores.append(leaf_score(leaf.tags, len(found)))
                text = leaf.content
                if leaf.title and leaf.title not in text:
                    text = f"{leaf.title}\n{text}"
                inputs.append(
                    SummaryItem(
                        node_id=leaf.id,
                        text=text,
                        level=0,
                        author=leaf.author,
                        time_start=leaf.time_start,
                        time_end=leaf.time_end,
                        title=leaf.title,
                    )
                )
            docs = {leaf.doc_id for leaf in leaves}
            doc_id = next(iter(docs)) if len(docs) == 1 else None
            version = 1 if doc_id is None else trees.next_version(tree.id, doc_id)
        else:
            # Deleted ones too: claiming a deleted child fails, and the seal is planned again.
            nodes = trees.summaries(ids, live_only=False)
            if len(nodes) != len(ids):
                raise SealRaced
            for node in nodes:
                entity_counts.update(node.entities)
                topic_counts.update(node.topics)
                scores.append(node.score)
                inputs.append(
                    SummaryItem(
                        node_id=node.id,
                        text=node.content,
                        level=node.level,
                        time_start=node.time_start,
                        time_end=node.time_end,
                    )
                )
            docs = {node.doc_id for node in nodes}
            doc_id = next(iter(docs)) if len(docs) == 1 else None
            version = 1 if doc_id is None else max(node.version for node in nodes)
        time_start, time_end = _span(inputs)
        content = self.summarizer.summarize(inputs, budget=self.config.output_token_budget)
        node = SummaryNode(
            id=summary_id_for(tree.id, level + 1, version, ids),
            tree_id=tree.id,
            source_id=tree.source_id,
            level=level + 1,
            parent_id=None,
            child_ids=tuple(ids),
            content=content,
            token_count=estimate_tokens(content),
            entities=_top(entity_counts, self.config.max_entities),
            topics=_top(topic_counts, self.config.max_topics),
            time_start=time_start,
            time_end=time_end,
            score=max(scores, default=0.0),
            sealed_at=datetime.now(UTC),
            summarizer=self.summarizer.name,
            doc_id=doc_id,
            version=version,
        )
        with self.store.transaction():
            trees.insert(node)
            trees.raise_root(tree.id, node.id, node.level)
        report.summaries += 1
        report.by_level[level + 1] = report.by_level.get(level + 1, 0) + 1
        if level == 0:
            report.leaves += len(ids)

    def _embed_new_summaries(self) -> int:
        """Embed, in batches, the summaries that have no vector of the store's model, when
        it is the embedder's (so summaries and chunks are always comparable)."""
        embedder = self.embedder
        if embedder is None or self.store.get_setting(ACTIVE_MODEL) != embedder.spec.signature:
            return 0
        try:
            return embed_summaries(self.store, embedder)
        except Exception as exc:
            # A summary without a vector still serves time and topic queries; the next
            # build or `embed` fills it in.
            log.warning("could not embed the new summaries: %s", exc)
            return 0


def _top(counts: Counter[str], limit: int) -> tuple[str, ...]:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(k for k, _ in ranked[:limit])


def _span(items: Sequence[SummaryItem]) -> tuple[datetime | None, datetime | None]:
    """The children's time range, earliest start to latest end (a child without an end ends
    at its start); unknown when any child's start is."""
    starts: list[datetime] = []
    ends: list[datetime] = []
    for item in items:
        if item.time_start is None:
            return None, None
        starts.append(item.time_start)
        ends.append(item.time_start if item.time_end is None else item.time_end)
    return min(starts), max(ends)
