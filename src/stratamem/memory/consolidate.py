"""Consolidation: score every fact true now and write a profile card (a rollup) for each
subject that is important or populous, keeping what has not changed.

The pass reads as the owner of a store opened without unlocking anything, so a locked
source is never read: its facts are sealed and gone from the fact table (see
:mod:`stratamem.store.locks`). It works per **scope**, the set of access scopes of a fact's
source (``eng``, ``hr,team``, ``""`` for a source only the owner reads): every number it
computes for a fact comes from the facts, chunks and summaries of the sources of that scope
alone, so a principal reading a rollup sees what a store holding only those sources would
hold, and a source of another scope shapes nothing.

**Scores** (each in [0, 1], rounded to 6 places; the generative-agents recipe, Park et al.
2023, "Generative Agents", §4.1, with a store's signals standing in for a model's)::

    score      = 0.4 · recency + 0.4 · importance + 0.2 · relevance
    recency    = 0.995 ^ hours(anchor − t),  t = valid_from, else recorded_at,
                 anchor = the latest t among the current facts of the fact's source (at most now)
    importance = 0.4 · confidence + 0.15 · origin + 0.15 · evidence + 0.15 · support
                 + 0.15 · history
        origin   = 1 asserted, 0.75 structure, 0.5 model
        evidence = min(nodes of evidence, 3) / 3
        support  = n / (n + 4), n = current facts of the subject in the scope
        history  = c / (c + 2), c = rows of the fact's (source, subject, predicate) that
                   hold no more (valid_to set): how often that value changed
    relevance  = max over the subject (and the object, where it is an entity) of m / (m + 5),
                 m = chunks and summaries of the scope's sources mentioning it in the 30 days
                 up to the scope's newest chunk

Recency is measured on each source's own clock: an archive ingested today with messages
from 2023 would otherwise score 0.995^8760 ≈ 0 on every fact, and the score would rank
nothing by time. It also makes a pass a function of the store alone: run again a week later
on an unchanged store, it scores and keeps exactly what it had.

**Rollups**: a (subject, scope) is rolled up when it has at least ``min_facts`` current facts
or its best fact scores at least ``min_score``. Its body holds the current facts (best first,
with their evidence ids and a snippet of the first), the summaries of the scope's trees that
mention the subject (highest level first, at most three), and the open questions (see
:func:`open_questions`). ``fact_set_hash`` is a digest of the ids it was built from (facts,
ended facts, summaries): a rollup whose hash is unchanged is kept as it is, a changed one is
rewritten, and one whose (subject, scope) no longer qualifies is dropped. Its id is
``rollup_`` + the first 24 hex digits of sha256(subject, scope).

Writes are short transactions (scores in batches, one rollup at a time, the drops together),
so a pass killed at any point leaves every rollup whole and consistent with its hash; the
next pass finishes the work.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from stratamem.errors import AccessDenied, StoreError
from stratamem.store.base import Store
from stratamem.store.facts import Fact, iso
from stratamem.store.jobs import Job
from stratamem.store.rollups import FactScore, Rollup
from stratamem.types import Filters, Source

log = logging.getLogger(__name__)

W_RECENCY, W_IMPORTANCE, W_RELEVANCE = 0.4, 0.4, 0.2
DECAY = 0.995  # per hour
ORIGIN_WEIGHT = {"asserted": 1.0, "structure": 0.75, "model": 0.5}
EVIDENCE_FULL = 3
SUPPORT_HALF = 4
HISTORY_HALF = 2
MENTIONS_HALF = 5
RECENT = timedelta(days=30)
LOW_CONFIDENCE = 0.5
MAX_SUMMARIES = 3
SUMMARY_SCAN = 500
SNIPPET_CHARS = 200
SUMMARY_CHARS = 800
SCORE_BATCH = 1000
EVERY_FACT = 1 << 40

DEFAULT_MIN_FACTS = 3
DEFAULT_MIN_SCORE = 0.75
MIN_FACTS_SETTING = "consolidate.min_facts"
MIN_SCORE_SETTING = "consolidate.min_score"
AFTER_INGEST_SETTING = "consolidate.after_ingest"
JOB_KIND = "consolidate"
JOB_KEY = "consolidate"
LEASE_RENEWAL_S = 30.0


@dataclass(slots=True)
class ConsolidationProgress:
    """Where a pass is: ``stage`` is ``read``, ``scores`` or ``rollups``."""

    stage: str = "read"
    done: int = 0
    total: int = 0


@dataclass(slots=True)
class ConsolidationReport:
    facts_scored: int = 0
    subjects: int = 0
    rollups_written: int = 0
    rollups_kept: int = 0
    rollups_dropped: int = 0
    rollups_skipped: list[str] = field(default_factory=list)
    min_facts: int = DEFAULT_MIN_FACTS
    min_score: float = DEFAULT_MIN_SCORE
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "facts_scored": self.facts_scored,
            "subjects": self.subjects,
            "rollups_written": self.rollups_written,
            "rollups_kept": self.rollups_kept,
            "rollups_dropped": self.rollups_dropped,
            "rollups_skipped": list(self.rollups_skipped),
            "min_facts": self.min_facts,
            "min_score": self.min_score,
            "seconds": round(self.seconds, 3),
        }


def rollup_id_for(subject: str, scope: str) -> str:
    """``rollup_`` + the first 24 hex digits of sha256(subject, scope)."""
    return "rollup_" + hashlib.sha256(f"{subject}\x1f{scope}".encode()).hexdigest()[:24]


def fact_set_hash(ids: Iterable[str]) -> str:
    """The first 32 hex digits of sha256 over the sorted ids, one per line."""
    return hashlib.sha256("\n".join(sorted(set(ids))).encode()).hexdigest()[:32]


def scope_of(source: Source) -> str:
    """A source's scope for consolidation: its access scopes joined by ``,`` (sorted)."""
    return ",".join(sorted(source.access))


# -- the scores, pure ---------------------------------------------------------------------------


def fact_time(fact: Fact) -> datetime:
    return fact.valid_from if fact.valid_from is not None else fact.recorded_at


def recency(when: datetime, anchor: datetime) -> float:
    """``0.995 ^ hours`` from ``when`` to ``anchor`` (1 for a time at or after it)."""
    hours = max(0.0, (anchor - when).total_seconds() / 3600)
    return float(DECAY**hours)


def saturating(count: int, half: int) -> float:
    """``count / (count + half)``: 0 for none, ½ at ``half``, towards 1."""
    return count / (count + half) if count > 0 else 0.0


def importance(fact: Fact, *, subject_facts: int, changes: int) -> float:
    return (
        0.4 * min(1.0, max(0.0, fact.confidence))
        + 0.15 * ORIGIN_WEIGHT.get(fact.origin, 0.5)
        + 0.15 * min(len(fact.evidence), EVIDENCE_FULL) / EVIDENCE_FULL
        + 0.15 * saturating(subject_facts, SUPPORT_HALF)
        + 0.15 * saturating(changes, HISTORY_HALF)
    )


def composite(rec: float, imp: float, rel: float) -> float:
    return W_RECENCY * rec + W_IMPORTANCE * imp + W_RELEVANCE * rel


def _r(value: float) -> float:
    return round(value, 6)


# -- what a pass reads ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Group:
    """The facts of one scope, and what the pass derives from them."""

    scope: str
    sources: list[Source]
    current: list[Fact] = field(default_factory=list)
    ended: list[Fact] = field(default_factory=list)  # single values that hold no more
    believed: list[Fact] = field(default_factory=list)

    @property
    def source_ids(self) -> tuple[str, ...]:
        return tuple(sorted(s.id for s in self.sources))


@dataclass(slots=True)
class _Plan:
    scores: list[FactScore]
    rollups: dict[tuple[str, str], Rollup]
    subjects: int


def _holds_now(fact: Fact, now: datetime) -> bool:
    starts = fact.valid_from is None or fact.valid_from <= now
    return starts and (fact.valid_to is None or now < fact.valid_to)


def _groups(store: Store, now: datetime) -> list[_Group]:
    sources = {s.id: s for s in store.sources() if not s.locked}
    groups: dict[str, _Group] = {}
    for source in sources.values():
        scope = scope_of(source)
        groups.setdefault(scope, _Group(scope, [])).sources.append(source)
    for fact in store.facts(believed_only=True, limit=EVERY_FACT):
        owner = sources.get(fact.source_id)
        if owner is None:
            continue
        group = groups[scope_of(owner)]
        group.believed.append(fact)
        if _holds_now(fact, now):
            group.current.append(fact)
    for group in groups.values():
        group.ended = _ended(group.believed, group.current, now)
    return [groups[k] for k in sorted(groups) if groups[k].current]


def _ended(believed: Sequence[Fact], current: Sequence[Fact], now: datetime) -> list[Fact]:
    """For each single-valued (source, subject, predicate) with no value now: its row that
    ended last, if it ended by ``now``."""
    live = {(f.source_id, f.subject, f.predicate) for f in current}
    last: dict[tuple[str, str, str], Fact] = {}
    for f in believed:
        key = (f.source_id, f.subject, f.predicate)
        if not f.single or key in live or f.valid_to is None or f.valid_to > now:
            continue
        seen = last.get(key)
        if seen is None or (f.valid_to, f.id) > (seen.valid_to or f.valid_to, seen.id):
            last[key] = f
    return sorted(last.values(), key=lambda f: (f.subject, f.predicate, f.source_id))


def open_questions(group_current: Sequence[Fact], ended: Sequence[Fact]) -> list[dict[str, Any]]:
    """What a reader of one subject's rollup should know is unsettled:

    * ``conflict``: sources of the scope hold different values now of a single-valued
      predicate;
    * ``low_confidence``: a current fact stated with confidence under 0.5;
    * ``ended``: a single-valued predicate whose last value ended with nothing after it.
    """
    out: list[dict[str, Any]] = []
    by_predicate: dict[str, list[Fact]] = defaultdict(list)
    for f in group_current:
        if f.single:
            by_predicate[f.predicate].append(f)
    for predicate in sorted(by_predicate):
        facts = by_predicate[predicate]
        if len({f.source_id for f in facts}) > 1 and len({f.object for f in facts}) > 1:
            values = sorted(facts, key=lambda f: (f.object, f.source_id, f.id))
            out.append(
                {
                    "kind": "conflict",
                    "predicate": predicate,
                    "values": [
                        {"object": f.object, "fact_id": f.id, "source_id": f.source_id}
                        for f in values
                    ],
                }
            )
    for f in sorted(group_current, key=lambda f: (f.predicate, f.id)):
        if f.confidence < LOW_CONFIDENCE:
            out.append(
                {
                    "kind": "low_confidence",
                    "predicate": f.predicate,
                    "object": f.object,
                    "fact_id": f.id,
                    "confidence": f.confidence,
                }
            )
    for f in ended:
        out.append(
            {
                "kind": "ended",
                "predicate": f.predicate,
                "object": f.object,
                "fact_id": f.id,
                "valid_to": iso(f.valid_to),
            }
        )
    return out


def _mentions(store: Store, group: _Group, entities: Iterable[str]) -> dict[str, int]:
    """How many chunks and summaries of the group's sources mention each entity in the 30
    days up to the group's newest chunk."""
    newest = [t for s in group.sources if (t := store.trees.newest_leaf_time(s.id)) is not None]
    if not newest:
        return {}
    window = Filters(sources=group.source_ids, since=max(newest) - RECENT, until=max(newest))
    return {e: store.trees.topic_nodes(e, window, 0)[1] for e in sorted(set(entities))}


def _score_group(store: Store, group: _Group, now: datetime) -> dict[str, FactScore]:
    anchors: dict[str, datetime] = {}
    for f in group.current:
        t = min(fact_time(f), now)
        if f.source_id not in anchors or t > anchors[f.source_id]:
            anchors[f.source_id] = t
    subject_facts: dict[str, int] = defaultdict(int)
    for f in group.current:
        subject_facts[f.subject] += 1
    changes: dict[tuple[str, str, str], int] = defaultdict(int)
    for f in group.believed:
        if f.valid_to is not None:
            changes[(f.source_id, f.subject, f.predicate)] += 1
    entities = {f.subject for f in group.current}
    entities |= {f.object for f in group.current if f.object_is_entity}
    mentions = _mentions(store, group, entities)
    scores: dict[str, FactScore] = {}
    for f in group.current:
        rec = recency(fact_time(f), anchors[f.source_id])
        imp = importance(
            f,
            subject_facts=subject_facts[f.subject],
            changes=changes[(f.source_id, f.subject, f.predicate)],
        )
        named = [f.subject, *([f.object] if f.object_is_entity else [])]
        rel = max(saturating(mentions.get(e, 0), MENTIONS_HALF) for e in named)
        scores[f.id] = FactScore(
            f.id, _r(rec), _r(imp), _r(rel), _r(composite(_r(rec), _r(imp), _r(rel)))
        )
    return scores


def _snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _cites(store: Store, facts: Iterable[Fact]) -> dict[str, str]:
    """Node id → a snippet of its text, for the first evidence node of each fact."""
    wanted = sorted({f.evidence[0] for f in facts if f.evidence})
    found = {c.id: _snippet(c.content) for c in store.chunks(wanted)}
    rest = [i for i in wanted if i not in found]
    if rest:
        found |= {s.id: _snippet(s.content) for s in store.trees.summaries(rest)}
    return found


def _summaries(store: Store, group: _Group, subject: str) -> list[dict[str, Any]]:
    """The live summaries of the group's trees that mention ``subject``: highest level first,
    then newest, at most :data:`MAX_SUMMARIES`."""
    filters = Filters(sources=group.source_ids)
    ids, _ = store.trees.topic_nodes(subject, filters, SUMMARY_SCAN)
    found = store.trees.summaries_by_id(ids, filters)
    order = {node_id: n for n, node_id in enumerate(ids)}
    chosen = sorted(found.values(), key=lambda s: (-s.node.level, order[s.node.id]))
    return [
        {
            "id": s.node.id,
            "level": s.node.level,
            "source_id": s.node.source_id,
            "time_start": iso(s.node.time_start),
            "time_end": iso(s.node.time_end),
            "text": _snippet(s.node.content, SUMMARY_CHARS),
        }
        for s in chosen[:MAX_SUMMARIES]
    ]


def _plan(store: Store, now: datetime, min_facts: int, min_score: float) -> _Plan:
    scores: list[FactScore] = []
    rollups: dict[tuple[str, str], Rollup] = {}
    subjects = 0
    for group in _groups(store, now):
        scored = _score_group(store, group, now)
        scores.extend(scored[f.id] for f in sorted(group.current, key=lambda f: f.id))
        by_subject: dict[str, list[Fact]] = defaultdict(list)
        for f in group.current:
            by_subject[f.subject].append(f)
        ended_of: dict[str, list[Fact]] = defaultdict(list)
        for f in group.ended:
            ended_of[f.subject].append(f)
        subjects += len(by_subject)
        chosen = {
            s: facts
            for s, facts in by_subject.items()
            if len(facts) >= min_facts or max(scored[f.id].score for f in facts) >= min_score
        }
        cites = _cites(store, (f for facts in chosen.values() for f in facts))
        for subject in sorted(chosen):
            rollups[(subject, group.scope)] = _rollup(
                store, group, subject, chosen[subject], ended_of[subject], scored, cites, now
            )
    return _Plan(scores, rollups, subjects)


def _rollup(
    store: Store,
    group: _Group,
    subject: str,
    facts: list[Fact],
    ended: list[Fact],
    scored: dict[str, FactScore],
    cites: dict[str, str],
    now: datetime,
) -> Rollup:
    ranked = sorted(facts, key=lambda f: (-scored[f.id].score, f.predicate, f.object, f.id))
    summaries = _summaries(store, group, subject)
    body = {
        "facts": [
            {
                "id": f.id,
                "predicate": f.predicate,
                "object": f.object,
                "object_is_entity": f.object_is_entity,
                "valid_from": iso(f.valid_from),
                "source_id": f.source_id,
                "confidence": f.confidence,
                "origin": f.origin,
                "score": scored[f.id].score,
                "evidence": list(f.evidence),
                "cite": (
                    {"node_id": f.evidence[0], "snippet": cites[f.evidence[0]]}
                    if f.evidence and f.evidence[0] in cites
                    else None
                ),
            }
            for f in ranked
        ],
        "summaries": summaries,
        "open_questions": open_questions(facts, ended),
    }
    built_from = [f.id for f in facts] + [f.id for f in ended] + [s["id"] for s in summaries]
    sources = {f.source_id for f in facts} | {f.source_id for f in ended}
    sources |= {s["source_id"] for s in summaries}
    return Rollup(
        id=rollup_id_for(subject, group.scope),
        subject=subject,
        scope=group.scope,
        fact_set_hash=fact_set_hash(built_from),
        built_at=now,
        score=max(scored[f.id].score for f in facts),
        body=body,
        sources=tuple(sorted(sources)),
    )


# -- the pass ------------------------------------------------------------------------------------


def thresholds(store: Store, min_facts: int | None, min_score: float | None) -> tuple[int, float]:
    """The thresholds a pass uses: those given, else those the last pass given them used
    (kept in the store's settings), else the defaults."""
    if min_facts is None:
        kept = store.get_setting(MIN_FACTS_SETTING)
        min_facts = int(kept) if kept else DEFAULT_MIN_FACTS
    if min_score is None:
        kept = store.get_setting(MIN_SCORE_SETTING)
        min_score = float(kept) if kept else DEFAULT_MIN_SCORE
    if isinstance(min_facts, bool) or not isinstance(min_facts, int) or min_facts < 1:
        raise ValueError(f"min_facts must be a whole number of at least 1, not {min_facts!r}")
    if not 0.0 <= float(min_score) <= 1.0:
        raise ValueError(f"min_score must be between 0 and 1, not {min_score!r}")
    return min_facts, float(min_score)


def consolidate(
    store: Store,
    *,
    now: datetime | None = None,
    min_facts: int | None = None,
    min_score: float | None = None,
    progress: Callable[[ConsolidationProgress], None] | None = None,
) -> ConsolidationReport:
    """Score the facts true at ``now`` (default: the clock) and bring the rollups up to date:
    write the new and changed ones, keep the unchanged, drop those no longer qualifying.

    ``min_facts`` and ``min_score`` (see the module docstring) are kept in the store when
    given, and a pass that does not give them uses the kept ones. The owner only: a store read
    as a principal is refused (:class:`AccessDenied`), and so is one opened with sources
    unlocked in memory (it refuses every write)."""
    started = time.perf_counter()
    found = store.principal()
    if found is not None:
        raise AccessDenied(f"principal {found.name!r} may not consolidate")
    if now is None:
        now = datetime.now(UTC)
    elif now.tzinfo is None:
        raise ValueError(f"now ({now.isoformat()}) has no time zone")
    given = (min_facts, min_score)
    min_facts, min_score = thresholds(store, min_facts, min_score)
    # Refuses at once a store that cannot be written (opened with sources unlocked).
    with store.transaction():
        if given[0] is not None:
            store.set_setting(MIN_FACTS_SETTING, str(min_facts))
        if given[1] is not None:
            store.set_setting(MIN_SCORE_SETTING, repr(min_score))
    report = ConsolidationReport(min_facts=min_facts, min_score=min_score)
    state = ConsolidationProgress()

    def tick(stage: str, done: int, total: int) -> None:
        if progress is not None:
            state.stage, state.done, state.total = stage, done, total
            progress(state)

    tick("read", 0, 0)
    with store.read_snapshot():
        plan = _plan(store, now, min_facts, min_score)
        existing = store.rollup_hashes()
    report.subjects = plan.subjects

    for start in range(0, len(plan.scores), SCORE_BATCH):
        batch = plan.scores[start : start + SCORE_BATCH]
        with store.transaction():
            store.write_fact_scores(batch, now)
        report.facts_scored += len(batch)
        tick("scores", report.facts_scored, len(plan.scores))

    total = len(plan.rollups)
    for done, key in enumerate(sorted(plan.rollups, key=lambda k: plan.rollups[k].id), 1):
        rollup = plan.rollups[key]
        if existing.get(key) == (rollup.id, rollup.fact_set_hash):
            report.rollups_kept += 1
        else:
            try:
                with store.transaction():
                    store.write_rollup(rollup)
            except StoreError as exc:
                # A source locked or forgotten since it was read: its rollup waits for the
                # next pass, which will not read it.
                log.warning("rollup of %s (%s) not written: %s", rollup.subject, key[1], exc)
                report.rollups_skipped.append(rollup.id)
            else:
                report.rollups_written += 1
        tick("rollups", done, total)

    stale = sorted(rollup_id for k, (rollup_id, _) in existing.items() if k not in plan.rollups)
    if stale:
        with store.transaction():
            report.rollups_dropped = store.drop_rollups(stale)
    report.seconds = time.perf_counter() - started
    return report


# -- the job after ingest -------------------------------------------------------------------------


def after_ingest(store: Store) -> bool:
    """Whether every ingest is followed by a consolidation pass (the store's setting)."""
    return store.get_setting(AFTER_INGEST_SETTING) == "on"


def set_after_ingest(store: Store, on: bool) -> None:
    with store.transaction():
        store.set_setting(AFTER_INGEST_SETTING, "on" if on else "off")


def queue_after_ingest(store: Store) -> bool:
    """Queue the consolidation job when the store asks for one after every ingest (before the
    ingest, so that a crash during it leaves the job to the next run); whether it did."""
    if not after_ingest(store):
        return False
    with store.transaction():
        store.jobs.enqueue(JOB_KIND, JOB_KEY, {})
    return True


def run_job(
    store: Store, *, progress: Callable[[ConsolidationProgress], None] | None = None
) -> ConsolidationReport | None:
    """Run the pending consolidation job (see :func:`run_pass`); None when none is pending."""
    job = store.jobs.claim(kind=JOB_KIND)
    if job is None:
        return None
    return _run(store, job, progress=progress)


def run_pass(
    store: Store,
    *,
    now: datetime | None = None,
    min_facts: int | None = None,
    min_score: float | None = None,
    progress: Callable[[ConsolidationProgress], None] | None = None,
) -> ConsolidationReport:
    """A pass (:func:`consolidate`) that also finishes the pending consolidation job, if any.
    A failed pass leaves the job to be retried, and raises."""
    job = store.jobs.claim(kind=JOB_KIND)
    return _run(store, job, now=now, min_facts=min_facts, min_score=min_score, progress=progress)


def _run(
    store: Store,
    job: Job | None,
    *,
    now: datetime | None = None,
    min_facts: int | None = None,
    min_score: float | None = None,
    progress: Callable[[ConsolidationProgress], None] | None = None,
) -> ConsolidationReport:
    touched = time.monotonic()

    def renew(state: ConsolidationProgress) -> None:
        nonlocal touched
        if job is not None and time.monotonic() - touched > LEASE_RENEWAL_S:
            store.jobs.touch(job)
            touched = time.monotonic()
        if progress is not None:
            progress(state)

    try:
        report = consolidate(
            store, now=now, min_facts=min_facts, min_score=min_score, progress=renew
        )
    except Exception as exc:
        if job is not None:
            store.jobs.fail(job, f"{type(exc).__name__}: {exc}")
        raise
    if job is not None:
        store.jobs.done(job)
    return report
