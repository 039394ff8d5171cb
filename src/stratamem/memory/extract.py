"""Facts extracted by a model: a durable job that asks any OpenAI-compatible chat-completions
server what a source's chunks state, given the facts already held about what they mention,
and applies its decisions (add, update, retract, none) as facts of origin ``model``.

Wire format (OpenAI's "Create chat completion" with structured outputs): ``POST
{base}/chat/completions`` with ``{"model", "messages": [system, user], "response_format":
{"type": "json_schema", "json_schema": {"name": "decisions", "strict": true, "schema":
DECISIONS_SCHEMA}}, "temperature", "max_tokens"}``. The system message says what to decide
(:data:`SYSTEM_PROMPT`); the user message lists the facts held now about the subjects the
batch mentions, each behind a label ``[F1]``, then the batch's chunks, each behind a label
``[node id | time | author | title]``. The answer is ``choices[0].message.content``: the JSON
``{"decisions": [...]}`` (see :mod:`stratamem.memory.decide` for the protocol, what is shown,
and what is refused); the older ``{"facts": [...]}`` is read as adds.

Validation. Each decision is checked on its own (:func:`~stratamem.memory.decide.
check_decision`); one that breaks the protocol is skipped, with its reason in the report, and
the rest are applied. A fact without a ``valid_from`` holds from its earliest evidence's
time. An answer that is not a completion, whose content is not JSON (a truncated answer
included), or that has no ``decisions`` list is asked again (``retries`` times, with
backoff), then the batch is skipped with the reason, its chunks left for the next run.

Who. A run reads the held facts through a :class:`FactReader`: the owner's reads every
unlocked source; a principal's (:class:`~stratamem.ops.extract`) reads through its gate and
changes only facts it may write, so the model is shown only facts the caller may read, and a
decision naming any other is skipped without saying what it holds. Whoever runs it, a batch
of source S is shown only the facts of sources every principal reading S also reads
(:func:`~stratamem.store.access.read_no_wider`). A job keeps the name of the principal that
queued it (``principal`` in its payload) and runs with that principal's view whoever runs the
queue; it is dropped when that principal is gone, may no longer write, or no longer reads S.

Errors. Connection errors, timeouts, 408, 409, 429 and 5xx are retried with exponential
backoff (``backoff · 2^attempt`` s, or the server's longer ``Retry-After``, at most
``max_backoff``); when they persist the job fails with the reason and is retried later by the
queue, with its own backoff. Any other status (401 and 403 above all: the API key) fails the
job for good at once, naming the endpoint. Either way the run stops: the endpoint is what
failed, and the other jobs stay queued.

Durability. Each source is one job (kind ``extract``, key ``extract:<source id>``) in the
store's queue. Each batch is asked with no transaction open; then its decisions (new values
through :func:`~stratamem.memory.remember.remember`, evidence the chunks the model cited, so a
fact's home is the chunk's source; closed ones through :func:`~stratamem.memory.decide.close`)
and the source's progress (setting ``extract.done:<source id>``,
the ids of the chunks already extracted) are written in one transaction. A process killed
between batches leaves whole batches behind; the next run takes the job over and asks only
for the chunks not yet done, so it ends where an uninterrupted run would have. A source
changed later is asked only for its new chunks. The progress also names one fact the source
was given (its witness): when that fact is gone, the source was forgotten since, and its
chunks are all asked again. Rerunning over the same chunks (``redo``) changes nothing that
is already so: reconciling a statement the store already holds records nothing.

A locked source is never sent to a model: its job is finished with a skip in the report.
The API key is sent as a bearer token and kept nowhere: neither in the store nor in a
report nor in a log line.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from stratamem.embed.base import Embedder
from stratamem.embed.tokens import estimate_tokens
from stratamem.errors import RequestFailed, SkipDecision, StratamemError
from stratamem.memory import decide
from stratamem.memory.decide import DECISIONS_SCHEMA, Decision, Held
from stratamem.memory.facts import fact_text
from stratamem.remote import JSONClient, openai_url
from stratamem.store import access
from stratamem.store.base import Store
from stratamem.store.facts import Fact
from stratamem.store.jobs import Job
from stratamem.types import Chunk, Principal, Source

log = logging.getLogger(__name__)

EXTRACT_KIND = "extract"
EXTRACT_JOB_PREFIX = "extract:"
ENDPOINT_SETTING = "extract.endpoint"
MODEL_SETTING = "extract.model"
PROGRESS_PREFIX = "extract.done:"
# Read, in this order, by the callers that take the key from the environment.
API_KEY_VARIABLES = ("STRATAMEM_EXTRACT_API_KEY", "OPENAI_API_KEY")
LEASE_S = 600.0
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
ITEM_KEYS = ("subject", "predicate", "object", "valid_from", "many", "confidence", "evidence")

SYSTEM_PROMPT = decide.SYSTEM_PROMPT

# The answer of earlier releases: a list of facts, each read as an add.
FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "subject": {"type": "string", "description": "kind:name"},
                    "predicate": {"type": "string"},
                    "object": {"type": "string"},
                    "valid_from": {"type": ["string", "null"], "description": "ISO 8601"},
                    "many": {"type": "boolean"},
                    "confidence": {"type": "number"},
                    "evidence": {"type": "array", "items": {"type": "string"}},
                },
                "required": list(ITEM_KEYS),
                "additionalProperties": False,
            },
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}


def extract_job_key(source_id: str) -> str:
    """The dedupe key of a source's extraction job: ``extract:`` + the source id."""
    return EXTRACT_JOB_PREFIX + source_id


def api_key_from_environment(environ: Mapping[str, str] | None = None) -> str | None:
    """The API key: ``STRATAMEM_EXTRACT_API_KEY``, else ``OPENAI_API_KEY``, else None."""
    env = os.environ if environ is None else environ
    for name in API_KEY_VARIABLES:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


@dataclass(frozen=True, slots=True)
class ExtractConfig:
    """Where and how to ask. ``endpoint`` is the server's OpenAI base URL
    (``http://127.0.0.1:8080/v1``; ``…/chat/completions`` is added); ``batch_size`` the most
    chunks per request, ``max_input_tokens`` the most chunk text per request (a larger chunk
    goes alone)."""

    endpoint: str
    model: str
    timeout: float = 60.0
    retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 30.0
    batch_size: int = 8
    max_input_tokens: int = 6000
    max_tokens: int = 2048
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ValueError("an extraction model must be named (--model)")
        parts = urllib.parse.urlsplit(self.endpoint.strip())
        if parts.username or parts.password:
            raise ValueError(
                "the extraction endpoint must not hold credentials: give the API key in "
                f"{API_KEY_VARIABLES[0]} instead"
            )
        openai_url(self.endpoint, "/chat/completions")  # refuses what is not an http(s) URL
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0, got {self.timeout}")
        if self.max_input_tokens < 1 or self.max_tokens < 1:
            raise ValueError("max_input_tokens and max_tokens must be >= 1")

    @property
    def url(self) -> str:
        return openai_url(self.endpoint, "/chat/completions")


def configured(store: Store) -> tuple[str, str] | None:
    """The (endpoint, model) that ingest extracts with, or None when extraction is off."""
    endpoint = store.get_setting(ENDPOINT_SETTING) or ""
    model = store.get_setting(MODEL_SETTING) or ""
    return (endpoint, model) if endpoint and model else None


def configure(store: Store, endpoint: str | None, model: str | None = None) -> None:
    """Turn extraction at ingest on (``endpoint`` and ``model``) or off (``endpoint`` None)."""
    if endpoint is None:
        endpoint, model = "", ""
    else:
        ExtractConfig(endpoint=endpoint, model=model or "")  # checks both
    with store.transaction():
        store.set_setting(ENDPOINT_SETTING, endpoint.strip())
        store.set_setting(MODEL_SETTING, (model or "").strip())


# -- reports -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Skipped:
    """Something left out: an answer's item (``item``: its index), a whole batch (``item``
    None), or a whole source (``batch`` None too)."""

    source: str
    reason: str
    batch: int | None = None
    item: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "batch": self.batch,
            "item": self.item,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision applied: which batch and item of the answer it was, and what it did."""

    source: str
    batch: int
    item: int
    decision: Decision

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "batch": self.batch, "item": self.item} | (
            self.decision.to_dict()
        )


@dataclass(slots=True)
class ExtractProgress:
    scope: str = ""
    batches: int = 0
    chunks: int = 0
    chunks_total: int = 0
    facts: int = 0


@dataclass(slots=True)
class ExtractReport:
    """What a run did: ``sources`` whose jobs finished, ``batches`` answered, ``chunks`` in
    them, ``facts`` accepted and written (``recorded``: the rows that changed the store; an
    accepted fact the store already held records none), ``skipped`` items, batches and
    sources with their reasons, ``retries`` of requests, and the jobs ``failed``. ``decided``
    lists every decision applied (``none`` included) with the model's reason and evidence;
    ``added``, ``updated``, ``retracted`` and ``kept`` count them by action."""

    endpoint: str = ""
    model: str = ""
    sources: int = 0
    batches: int = 0
    chunks: int = 0
    facts: int = 0
    recorded: int = 0
    added: int = 0
    updated: int = 0
    retracted: int = 0
    kept: int = 0
    decided: list[Decided] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retries: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "sources": self.sources,
            "batches": self.batches,
            "chunks": self.chunks,
            "facts": self.facts,
            "recorded": self.recorded,
            "added": self.added,
            "updated": self.updated,
            "retracted": self.retracted,
            "kept": self.kept,
            "decided": [d.to_dict() for d in self.decided],
            "skipped": [s.to_dict() for s in self.skipped],
            "failed": list(self.failed),
            "retries": self.retries,
            "seconds": round(self.seconds, 3),
        }


class _Unparseable(Exception):
    """The answer as a whole cannot be read: ask again."""


class _JobFailed(Exception):
    """The endpoint gave no answer: fail the job (for good when ``final``) and stop."""

    def __init__(self, reason: str, *, final: bool) -> None:
        super().__init__(reason)
        self.final = final


class _Stop(Exception):
    """Stop this job without finishing it: another run took it over."""


class _Locked(Exception):
    """The source was locked while its job ran: finish the job, sending nothing more."""


# -- who reads ---------------------------------------------------------------------------------


class FactReader(Protocol):
    """The caller's view of the facts: what the model may be shown, and what it may change.
    ``principal``: the caller's name (None: the owner), kept with the jobs it queues."""

    @property
    def principal(self) -> str | None: ...

    def facts_about(self, subjects: Sequence[str]) -> list[Fact]:
        """The believed facts of these subjects the caller may read."""
        ...

    def may_change(self, fact: Fact) -> bool:
        """Whether the caller may close ``fact`` (it reads and may write its source)."""
        ...


class OwnerReader:
    """The owner's view: every fact of an unlocked source."""

    principal: str | None = None

    def __init__(self, store: Store) -> None:
        self.store = store

    def facts_about(self, subjects: Sequence[str]) -> list[Fact]:
        out: list[Fact] = []
        for subject in subjects:
            out.extend(self.store.facts(subject=subject, believed_only=True, limit=1000))
        return out

    def may_change(self, fact: Fact) -> bool:
        return not self.store.is_locked(fact.source_id)


class StoredPrincipalReader:
    """A principal's view read from the owner's store, for a job it queued that runs later:
    the facts of the unlocked sources it reads now."""

    def __init__(self, store: Store, principal: Principal) -> None:
        self.store = store
        self.principal = principal.name
        self.readable = frozenset(
            s.id for s in store.sources(counts=False) if access.may_read(principal, s)
        )

    def facts_about(self, subjects: Sequence[str]) -> list[Fact]:
        out: list[Fact] = []
        for subject in subjects:
            out.extend(self.store.facts(subject=subject, believed_only=True, limit=1000))
        return [f for f in out if f.source_id in self.readable]

    def may_change(self, fact: Fact) -> bool:
        return fact.source_id in self.readable and not self.store.is_locked(fact.source_id)


# -- the extractor -----------------------------------------------------------------------------


class Extractor:
    """Runs the extraction jobs of one store against one endpoint. ``api_key`` is sent as a
    bearer token; this class never reads the environment. ``embedder`` embeds the facts
    recorded (for :func:`~stratamem.memory.search.search_facts`), after each batch's commit.
    ``reader`` is whose facts the model is shown and may change (default: the owner's)."""

    def __init__(
        self,
        store: Store,
        config: ExtractConfig,
        *,
        api_key: str | None = None,
        embedder: Embedder | None = None,
        reader: FactReader | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.reader: FactReader = reader if reader is not None else OwnerReader(store)
        self.config = config
        self.url = config.url
        self.embedder = embedder
        self._sleep = sleep
        self._client = JSONClient(
            self.url,
            api_key=api_key,
            timeout=config.timeout,
            retries=0,
            extra="llm",
            what="fact extraction",
        )

    def close(self) -> None:
        """Close the connections to the endpoint."""
        self._client.close()

    def __enter__(self) -> Extractor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the queue ---------------------------------------------------------------------------

    def enqueue(self, sources: Sequence[str] = (), *, redo: bool = False) -> list[Source]:
        """Queue a job for each of these sources (ids or scopes; all when none), locked ones
        too (their job only reports the skip). ``redo`` forgets their progress first, so every
        chunk is asked again. Returns the sources queued."""
        if sources:
            chosen = list({s.id: s for s in map(self.store.resolve_source, sources)}.values())
        else:
            chosen = self.store.sources()
        payload: dict[str, Any] = {}
        if self.reader.principal is not None:
            # The job runs as whoever queued it, however late and whoever runs the queue.
            payload["principal"] = self.reader.principal
        for source in chosen:
            with self.store.transaction():
                if redo:
                    self.store.set_setting(PROGRESS_PREFIX + source.id, "")
                self.store.jobs.enqueue(
                    EXTRACT_KIND, extract_job_key(source.id), {"source_id": source.id} | payload
                )
        return chosen

    def _job_reader(self, job: Job, source: Source) -> FactReader | None:
        """Whose view a job runs with: the principal that queued it (None when that
        principal is gone, may no longer write, or no longer reads the source), else the
        owner's."""
        name = job.payload.get("principal")
        if not isinstance(name, str) or not name or name == self.reader.principal:
            return self.reader
        principal = self.store.get_principal(name)
        if principal is None or not principal.write or not access.may_read(principal, source):
            return None
        return StoredPrincipalReader(self.store, principal)

    def run_pending(
        self,
        *,
        lease_s: float = LEASE_S,
        progress: Callable[[ExtractProgress], None] | None = None,
        only: Sequence[str] | None = None,
    ) -> ExtractReport:
        """Run every ready extraction job (``only``: those of these source ids), until none
        is left or the endpoint fails."""
        report = ExtractReport(endpoint=self.url, model=self.config.model)
        started = time.perf_counter()
        keys = None if only is None else [extract_job_key(s) for s in dict.fromkeys(only)]
        try:
            while (job := self._claim(lease_s, keys)) is not None:
                source_id = str(job.payload.get("source_id", ""))
                source = next((s for s in self.store.sources() if s.id == source_id), None)
                if source is None:  # forgotten since it was queued
                    self.store.jobs.done(job)
                    continue
                reader = self._job_reader(job, source)
                if reader is None:
                    self.store.jobs.done(job)
                    report.skipped.append(
                        Skipped(source.scope, "the principal that queued it no longer may")
                    )
                    continue
                try:
                    self._run_job(job, source, report, progress, reader)
                except _Stop as stop:
                    log.warning("extracting %s: %s", source.scope, stop)
                    continue
                except _JobFailed as failure:
                    reason = str(failure)
                    if failure.final:
                        self.store.jobs.fail(job, reason, max_attempts=job.attempts)
                    else:
                        self.store.jobs.fail(job, reason)
                    report.failed.append(f"{source.scope}: {reason}")
                    log.warning("extracting %s failed: %s", source.scope, reason)
                    break
                except Exception as exc:
                    self.store.jobs.fail(job, f"{type(exc).__name__}: {exc}")
                    report.failed.append(f"{source.scope}: {exc}")
                    log.warning("extracting %s failed: %s", source.scope, exc)
                    continue
                if not self.store.jobs.done(job):
                    log.warning(
                        "extracting %s: the job was taken over by another run", source.scope
                    )
                report.sources += 1
        finally:
            report.seconds = time.perf_counter() - started
        return report

    def _claim(self, lease_s: float, keys: list[str] | None) -> Job | None:
        if keys is None:
            return self.store.jobs.claim(lease_s=lease_s, kind=EXTRACT_KIND)
        while keys:  # each at most once a run: one not ready is done, failed or held
            job = self.store.jobs.claim(lease_s=lease_s, kind=EXTRACT_KIND, key=keys.pop(0))
            if job is not None:
                return job
        return None

    # -- one source ----------------------------------------------------------------------------

    def _run_job(
        self,
        job: Job,
        source: Source,
        report: ExtractReport,
        progress: Callable[[ExtractProgress], None] | None,
        reader: FactReader,
    ) -> None:
        try:
            self._extract(job, source, report, progress, reader)
        except _Locked:
            report.skipped.append(
                Skipped(source.scope, "the source is locked: nothing of it is sent to a model")
            )

    def _extract(
        self,
        job: Job,
        source: Source,
        report: ExtractReport,
        progress: Callable[[ExtractProgress], None] | None,
        reader: FactReader,
    ) -> None:
        if source.locked or self.store.is_locked(source.id):
            raise _Locked
        chunks = list(self.store.iter_chunks(source.id))
        present = {c.id for c in chunks}
        done, witness = self._progress(source.id)
        done &= present
        todo = [c for c in chunks if c.id not in done]
        state = ExtractProgress(scope=source.scope, chunks_total=len(todo))
        if progress is not None:
            progress(state)
        evidenced = self._evidenced(source.id)
        for number, batch in enumerate(self.batches(todo), start=1):
            if not self.store.jobs.touch(job):
                raise _Stop("the job was taken over by another run")
            if self.store.is_locked(source.id):
                raise _Locked
            held = self.held(batch, evidenced, within=self._shareable(source.id), reader=reader)
            items, reason = self._ask(batch, held, report)
            if items is None:
                report.skipped.append(Skipped(source.scope, reason, batch=number))
                continue
            decisions = self._decisions(items, batch, held, source.scope, number, report)
            witness = self._write(
                source, batch, decisions, present, done, witness, number, report, reader
            )
            done |= {c.id for c in batch}
            report.batches += 1
            report.chunks += len(batch)
            state.batches += 1
            state.chunks += len(batch)
            state.facts = report.facts
            if progress is not None:
                progress(state)

    def _evidenced(self, source_id: str) -> list[Fact]:
        """The believed facts of the source that rest on evidence (their subjects are
        mentioned by the batches holding it)."""
        rows = self.store.facts(believed_only=True, limit=1_000_000_000)
        return [f for f in rows if f.source_id == source_id and f.evidence]

    def _shareable(self, source_id: str) -> frozenset[str]:
        """The sources whose facts a batch of ``source_id`` may be shown: those every
        principal reading it also reads (see :func:`~stratamem.store.access.read_no_wider`),
        as the store stands now."""
        sources = self.store.sources(counts=False)
        target = next((s for s in sources if s.id == source_id), None)
        if target is None:
            return frozenset()
        if self.store.is_locked(source_id):
            return frozenset()
        return access.read_no_wider(self.store.principals(), sources, target)

    def held(
        self,
        batch: Sequence[Chunk],
        evidenced: Sequence[Fact] = (),
        *,
        within: Collection[str] | None = None,
        reader: FactReader | None = None,
    ) -> Held:
        """The facts shown to the model with ``batch``: the believed ones the reader may read
        about the subjects the batch mentions (see :mod:`stratamem.memory.decide`), of the
        sources ``within`` only, where given; ``reader``: whose view (default: the
        extractor's)."""
        ids = [c.id for c in batch]
        inside = set(ids)
        mine = [f for f in evidenced if inside.intersection(f.evidence)]
        found = decide.mentioned_subjects(self.store.mentions_of(ids), mine)
        subjects = found[: decide.MAX_SUBJECTS]
        facts = (reader or self.reader).facts_about(subjects) if subjects else []
        if within is not None:
            facts = [f for f in facts if f.source_id in within]
        return decide.choose_held(facts, subjects_left_out=len(found) - len(subjects))

    def batches(self, chunks: Sequence[Chunk]) -> list[list[Chunk]]:
        """``chunks`` in order, cut into batches of at most ``batch_size`` chunks and
        ``max_input_tokens`` of text (a larger chunk alone)."""
        out: list[list[Chunk]] = []
        current: list[Chunk] = []
        used = 0
        for chunk in chunks:
            cost = estimate_tokens(_label(chunk)) + chunk.token_count
            if current and (
                len(current) >= self.config.batch_size or used + cost > self.config.max_input_tokens
            ):
                out.append(current)
                current, used = [], 0
            current.append(chunk)
            used += cost
        if current:
            out.append(current)
        return out

    def messages(self, batch: Sequence[Chunk], held: Held | None = None) -> list[dict[str, str]]:
        """The chat messages sent for ``batch``: the instructions, then the facts held about
        what it mentions and the chunks."""
        records = "\n\n".join(f"{_label(c)}\n{c.content.strip()}" for c in batch)
        facts = (held or Held({})).lines()
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Facts held now:\n\n{facts}\n\nRecords:\n\n{records}"},
        ]

    def payload(self, batch: Sequence[Chunk], held: Held | None = None) -> dict[str, Any]:
        return {
            "model": self.config.model,
            "messages": self.messages(batch, held),
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "decisions", "strict": True, "schema": DECISIONS_SCHEMA},
            },
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "stream": False,
        }

    # -- asking --------------------------------------------------------------------------------

    def _ask(
        self, batch: Sequence[Chunk], held: Held, report: ExtractReport
    ) -> tuple[list[Any] | None, str]:
        """The answer's decisions, or (None, why) when no readable answer came."""
        payload = self.payload(batch, held)
        cfg = self.config
        attempt = 0
        while True:
            try:
                _, raw = self._client.post(payload)
                return decisions_in(raw), ""
            except RequestFailed as failure:
                if not failure.retry:
                    raise _JobFailed(self._refused(failure), final=True) from failure
                if attempt >= cfg.retries:
                    raise _JobFailed(
                        f"{self.url}: {failure.reason} (after {attempt + 1} attempts)", final=False
                    ) from failure
                delay = max(cfg.backoff * 2**attempt, failure.delay or 0.0)
            except _Unparseable as bad:
                if attempt >= cfg.retries:
                    return None, f"no readable answer after {attempt + 1} attempts: {bad}"
                delay = cfg.backoff * 2**attempt
            report.retries += 1
            self._sleep(min(delay, cfg.max_backoff))
            attempt += 1

    def _refused(self, failure: RequestFailed) -> str:
        status, detail = failure.status, failure.detail or failure.reason
        if status in (401, 403):
            hint = f"not authorised: check the API key ({' or '.join(API_KEY_VARIABLES)})"
        elif status == 404:
            hint = f"not found: check the endpoint and the model {self.config.model!r}"
        else:
            hint = "the server refused the request"
        return f"{self.url} (HTTP {status}): {hint}: {detail}"

    # -- checking ------------------------------------------------------------------------------

    def _decisions(
        self,
        items: Sequence[Any],
        batch: Sequence[Chunk],
        held: Held,
        scope: str,
        number: int,
        report: ExtractReport,
    ) -> list[tuple[int, Decision]]:
        by_id = {c.id: c for c in batch}
        now = datetime.now(UTC)
        out: list[tuple[int, Decision]] = []
        for index, item in enumerate(items[: decide.MAX_DECISIONS]):
            try:
                out.append((index, decide.check_decision(item, by_id, held, now=now)))
            except SkipDecision as skip:
                report.skipped.append(Skipped(scope, str(skip), batch=number, item=index))
        if len(items) > decide.MAX_DECISIONS:
            report.skipped.append(
                Skipped(
                    scope,
                    f"the answer holds {len(items)} decisions: only the first "
                    f"{decide.MAX_DECISIONS} are read",
                    batch=number,
                    item=decide.MAX_DECISIONS,
                )
            )
        return out

    # -- writing -------------------------------------------------------------------------------

    def _write(
        self,
        source: Source,
        batch: Sequence[Chunk],
        decisions: Sequence[tuple[int, Decision]],
        present: set[str],
        done: set[str],
        witness: str | None,
        number: int,
        report: ExtractReport,
        reader: FactReader,
    ) -> str | None:
        """The batch's decisions and the source's progress, in one transaction; returns the
        witness now recorded."""
        recorded: list[Fact] = []
        applied: list[Decided] = []
        with self.store.transaction():
            if self.store.is_locked(source.id):
                raise _Locked
            now = datetime.now(UTC)
            for index, decision in decisions:
                try:
                    with self.store.transaction():  # a savepoint: a refused one leaves nothing
                        recorded.extend(
                            decide.apply(
                                self.store,
                                decision,
                                source_id=source.id,
                                now=now,
                                may_change=reader.may_change,
                            )
                        )
                except (SkipDecision, StratamemError, ValueError) as exc:
                    report.skipped.append(Skipped(source.scope, str(exc), batch=number, item=index))
                    continue
                applied.append(Decided(source.scope, number, index, decision))
            if witness is None and recorded:
                witness = recorded[0].id
            finished = sorted((done | {c.id for c in batch}) & present)
            self.store.set_setting(
                PROGRESS_PREFIX + source.id, json.dumps({"chunks": finished, "witness": witness})
            )
        for found in applied:
            action = found.decision.action
            if action in ("add", "update"):
                report.facts += 1
            if action == "add":
                report.added += 1
            elif action == "update":
                report.updated += 1
            elif action == "retract":
                report.retracted += 1
            else:
                report.kept += 1
        report.decided.extend(applied)
        report.recorded += len(recorded)
        self._embed(recorded)
        return witness

    def _embed(self, facts: Sequence[Fact]) -> None:
        """Vectors of the facts just recorded, in a transaction of their own: a fact without
        one is still found by its words."""
        if self.embedder is None or not facts:
            return
        try:
            vectors = self.embedder.embed_batch([fact_text(f) for f in facts], role="passage")
            with self.store.transaction():
                self.store.write_fact_vectors(
                    self.embedder.spec.signature,
                    [
                        (f.id, np.asarray(v, dtype="<f4").tobytes())
                        for f, v in zip(facts, vectors, strict=True)
                    ],
                )
        except Exception as exc:
            log.warning("could not embed the facts extracted: %s", exc)

    def _progress(self, source_id: str) -> tuple[set[str], str | None]:
        """The chunks of the source already extracted, and its witness; none when the
        witness is gone (the source was forgotten and read again since)."""
        raw = self.store.get_setting(PROGRESS_PREFIX + source_id)
        if not raw:
            return set(), None
        try:
            saved = json.loads(raw)
            chunks = {str(c) for c in saved.get("chunks", [])}
            witness = saved.get("witness")
        except (ValueError, AttributeError, TypeError):
            return set(), None
        if isinstance(witness, str):
            if not self.store.facts(ids=[witness], believed_only=False, limit=1):
                return set(), None
            return chunks, witness
        return chunks, None


# -- the answer ------------------------------------------------------------------------------


def decisions_in(raw: bytes) -> list[Any]:
    """The decisions of a chat completion's content (``{"decisions": [...]}``, or the older
    ``{"facts": [...]}`` read as adds); :class:`_Unparseable` if the answer is not a
    completion whose content is one of those."""
    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise _Unparseable(f"the answer is not JSON ({exc})") from exc
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Unparseable("the answer has no 'choices'")
    message = choices[0].get("message")
    content: Any = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: [{"type": "text", "text": …}]
        texts = [part.get("text") for part in content if isinstance(part, dict)]
        content = "".join(text for text in texts if isinstance(text, str))
    if not isinstance(content, str) or not content.strip():
        refusal = message.get("refusal") if isinstance(message, dict) else None
        if refusal:
            raise _Unparseable(f"the model refused: {str(refusal)[:200]}")
        raise _Unparseable("the answer has no text content")
    text = _THINK.sub("", content).strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise _Unparseable(f"the content is not JSON ({exc}): {text[:80]!r}") from exc
    found = decide.decisions_of(body)
    if found is None:
        raise _Unparseable("the content has no 'decisions' list")
    return found


def _label(chunk: Chunk) -> str:
    """``[node id | 2024-03-04 09:15 UTC | alice | title]``: what the model cites and
    dates a fact by."""
    parts = [chunk.id]
    if chunk.time_start is not None:
        parts.append(chunk.time_start.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    if chunk.author:
        parts.append(chunk.author)
    if chunk.title:
        parts.append(chunk.title)
    return "[" + " | ".join(" ".join(p.split()) for p in parts) + "]"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:79] + "…"
