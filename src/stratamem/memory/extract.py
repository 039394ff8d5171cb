"""Facts extracted by a model: a durable job that asks any OpenAI-compatible chat-completions
server what a source's chunks state, and writes the answers as facts of origin ``model``.

Wire format (OpenAI's "Create chat completion" with structured outputs): ``POST
{base}/chat/completions`` with ``{"model", "messages": [system, user], "response_format":
{"type": "json_schema", "json_schema": {"name": "facts", "strict": true, "schema":
FACTS_SCHEMA}}, "temperature", "max_tokens"}``. The system message says what to extract
(:data:`SYSTEM_PROMPT`); the user message lists the batch's chunks, each behind a label
``[node id | time | author | title]``. The answer is ``choices[0].message.content``: the JSON
``{"facts": [{"subject", "predicate", "object", "valid_from", "many", "confidence",
"evidence"}, ...]}``.

Validation. An item is kept only if it is an object with exactly the schema's keys; its
subject is an entity id of a known kind (person, email, handle, channel, tag, url, topic);
its predicate and object are non-empty text; ``valid_from`` is null or an ISO 8601 date or
time (one without a zone is UTC); ``many`` is a boolean; ``confidence`` a finite number
(clamped to [0, 1]); ``evidence`` a non-empty list of node ids of the batch. Any other item is
skipped, with its reason in the report, and the rest are kept. A fact without a
``valid_from`` holds from its earliest evidence's time. An answer that is not a completion,
whose content is not JSON, or that has no ``facts`` list is asked again (``retries`` times,
with backoff), then the batch is skipped with the reason, its chunks left for the next run.

Errors. Connection errors, timeouts, 408, 409, 429 and 5xx are retried with exponential
backoff (``backoff · 2^attempt`` s, or the server's longer ``Retry-After``, at most
``max_backoff``); when they persist the job fails with the reason and is retried later by the
queue, with its own backoff. Any other status (401 and 403 above all: the API key) fails the
job for good at once, naming the endpoint. Either way the run stops: the endpoint is what
failed, and the other jobs stay queued.

Durability. Each source is one job (kind ``extract``, key ``extract:<source id>``) in the
store's queue. Each batch is asked with no transaction open; then its facts (through
:func:`~stratamem.memory.remember.remember`, evidence the chunks the model cited, so a fact's
home is the chunk's source) and the source's progress (setting ``extract.done:<source id>``,
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
import math
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from stratamem.embed.base import Embedder
from stratamem.embed.tokens import estimate_tokens
from stratamem.errors import RequestFailed, StratamemError
from stratamem.memory.facts import Statement, fact_text
from stratamem.memory.remember import entity_id, predicate_name, remember, statement
from stratamem.remote import JSONClient, openai_url
from stratamem.store.base import Store
from stratamem.store.facts import Fact
from stratamem.store.jobs import Job
from stratamem.timeparse import as_utc
from stratamem.types import Chunk, Source

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
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ].*)?$")
ITEM_KEYS = ("subject", "predicate", "object", "valid_from", "many", "confidence", "evidence")

SYSTEM_PROMPT = (
    "You extract facts for a long-term memory from the records the user gives. A fact says "
    "that a subject's predicate is an object, e.g. subject 'person:carol diaz', predicate "
    "'leads', object 'on-call'. Write the subject as an entity id, kind:name, the kind one of "
    "person, email, handle, channel, tag, url or topic (person:carol diaz, topic:phoenix, "
    "channel:#eng); write the object as an entity id when it names one, else as short text. "
    "The predicate is a short verb or noun phrase in lower case with words joined by "
    "underscores (leads, works_on, release_date). Set valid_from to the ISO 8601 date or time "
    "from which the fact holds only when the text says it, else null. Set many to true when "
    "the predicate holds many values at once (likes, attended, member_of), false when a new "
    "value replaces the old one (leads, status, lives_in). evidence lists the ids of the "
    "records the fact rests on, copied exactly from the brackets that open each record. "
    "confidence is how certain the text makes the fact, from 0 to 1. State only what the "
    'records say; do not guess. Answer with JSON only, {"facts": [...]}, an empty list '
    "when the records state no fact."
)

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
    sources with their reasons, ``retries`` of requests, and the jobs ``failed``."""

    endpoint: str = ""
    model: str = ""
    sources: int = 0
    batches: int = 0
    chunks: int = 0
    facts: int = 0
    recorded: int = 0
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
            "skipped": [s.to_dict() for s in self.skipped],
            "failed": list(self.failed),
            "retries": self.retries,
            "seconds": round(self.seconds, 3),
        }


class _Unparseable(Exception):
    """The answer as a whole cannot be read: ask again."""


class _SkipItem(Exception):
    """One item of an answer breaks the schema: leave it out."""


class _JobFailed(Exception):
    """The endpoint gave no answer: fail the job (for good when ``final``) and stop."""

    def __init__(self, reason: str, *, final: bool) -> None:
        super().__init__(reason)
        self.final = final


class _Stop(Exception):
    """Stop this job without finishing it: another run took it over."""


class _Locked(Exception):
    """The source was locked while its job ran: finish the job, sending nothing more."""


# -- the extractor -----------------------------------------------------------------------------


class Extractor:
    """Runs the extraction jobs of one store against one endpoint. ``api_key`` is sent as a
    bearer token; this class never reads the environment. ``embedder`` embeds the facts
    recorded (for :func:`~stratamem.memory.search.search_facts`), after each batch's commit."""

    def __init__(
        self,
        store: Store,
        config: ExtractConfig,
        *,
        api_key: str | None = None,
        embedder: Embedder | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
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
        for source in chosen:
            with self.store.transaction():
                if redo:
                    self.store.set_setting(PROGRESS_PREFIX + source.id, "")
                self.store.jobs.enqueue(
                    EXTRACT_KIND, extract_job_key(source.id), {"source_id": source.id}
                )
        return chosen

    def run_pending(
        self,
        *,
        lease_s: float = LEASE_S,
        progress: Callable[[ExtractProgress], None] | None = None,
    ) -> ExtractReport:
        """Run every ready extraction job, until the queue is empty or the endpoint fails."""
        report = ExtractReport(endpoint=self.url, model=self.config.model)
        started = time.perf_counter()
        try:
            while (job := self.store.jobs.claim(lease_s=lease_s, kind=EXTRACT_KIND)) is not None:
                source_id = str(job.payload.get("source_id", ""))
                source = next((s for s in self.store.sources() if s.id == source_id), None)
                if source is None:  # forgotten since it was queued
                    self.store.jobs.done(job)
                    continue
                try:
                    self._run_job(job, source, report, progress)
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

    # -- one source ----------------------------------------------------------------------------

    def _run_job(
        self,
        job: Job,
        source: Source,
        report: ExtractReport,
        progress: Callable[[ExtractProgress], None] | None,
    ) -> None:
        try:
            self._extract(job, source, report, progress)
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
        for number, batch in enumerate(self.batches(todo), start=1):
            if not self.store.jobs.touch(job):
                raise _Stop("the job was taken over by another run")
            if self.store.is_locked(source.id):
                raise _Locked
            items, reason = self._ask(batch, report)
            if items is None:
                report.skipped.append(Skipped(source.scope, reason, batch=number))
                continue
            said = self._statements(items, batch, source.scope, number, report)
            witness = self._write(source, batch, said, present, done, witness, number, report)
            done |= {c.id for c in batch}
            report.batches += 1
            report.chunks += len(batch)
            state.batches += 1
            state.chunks += len(batch)
            state.facts = report.facts
            if progress is not None:
                progress(state)

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

    def messages(self, batch: Sequence[Chunk]) -> list[dict[str, str]]:
        """The chat messages sent for ``batch``: the instructions, then the chunks."""
        records = "\n\n".join(f"{_label(c)}\n{c.content.strip()}" for c in batch)
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Records:\n\n{records}"},
        ]

    def payload(self, batch: Sequence[Chunk]) -> dict[str, Any]:
        return {
            "model": self.config.model,
            "messages": self.messages(batch),
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "facts", "strict": True, "schema": FACTS_SCHEMA},
            },
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "stream": False,
        }

    # -- asking --------------------------------------------------------------------------------

    def _ask(self, batch: Sequence[Chunk], report: ExtractReport) -> tuple[list[Any] | None, str]:
        """The answer's items, or (None, why) when no readable answer came."""
        payload = self.payload(batch)
        cfg = self.config
        attempt = 0
        while True:
            try:
                _, raw = self._client.post(payload)
                return facts_of(raw), ""
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

    def _statements(
        self,
        items: Sequence[Any],
        batch: Sequence[Chunk],
        scope: str,
        number: int,
        report: ExtractReport,
    ) -> list[tuple[int, Statement]]:
        by_id = {c.id: c for c in batch}
        said: list[tuple[int, Statement]] = []
        for index, item in enumerate(items):
            try:
                said.append((index, check_item(item, by_id)))
            except _SkipItem as skip:
                report.skipped.append(Skipped(scope, str(skip), batch=number, item=index))
        return said

    # -- writing -------------------------------------------------------------------------------

    def _write(
        self,
        source: Source,
        batch: Sequence[Chunk],
        said: Sequence[tuple[int, Statement]],
        present: set[str],
        done: set[str],
        witness: str | None,
        number: int,
        report: ExtractReport,
    ) -> str | None:
        """The batch's facts and the source's progress, in one transaction; returns the
        witness now recorded."""
        recorded: list[Fact] = []
        accepted = 0
        with self.store.transaction():
            if self.store.is_locked(source.id):
                raise _Locked
            now = datetime.now(UTC)
            for index, statement_ in said:
                try:
                    write = remember(self.store, statement_, now=now)
                except (StratamemError, ValueError) as exc:
                    report.skipped.append(Skipped(source.scope, str(exc), batch=number, item=index))
                    continue
                accepted += 1
                recorded.extend(write.recorded)
            if witness is None and recorded:
                witness = recorded[0].id
            finished = sorted((done | {c.id for c in batch}) & present)
            self.store.set_setting(
                PROGRESS_PREFIX + source.id, json.dumps({"chunks": finished, "witness": witness})
            )
        report.facts += accepted
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


def facts_of(raw: bytes) -> list[Any]:
    """The ``facts`` list of a chat completion's content; :class:`_Unparseable` if the answer
    is not a completion whose content is ``{"facts": [...]}``."""
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
    facts = body.get("facts") if isinstance(body, dict) else None
    if not isinstance(facts, list):
        raise _Unparseable("the content has no 'facts' list")
    return facts


def check_item(item: Any, batch: Mapping[str, Chunk]) -> Statement:
    """The statement an answer's item makes, of origin ``model``; :class:`_SkipItem` with the
    reason when it breaks the schema or cites a node outside ``batch``."""
    if not isinstance(item, dict):
        raise _SkipItem(f"not an object: {_shown(item)}")
    missing = [k for k in ITEM_KEYS if k not in item]
    if missing:
        raise _SkipItem(f"missing {', '.join(missing)}")
    extra = sorted(set(item) - set(ITEM_KEYS))
    if extra:
        raise _SkipItem(f"unknown keys {', '.join(extra)}")
    for name in ("subject", "predicate", "object"):
        if not isinstance(item[name], str) or not item[name].strip():
            raise _SkipItem(f"{name} must be non-empty text, not {_shown(item[name])}")
    try:
        subject = entity_id(item["subject"])
        predicate_name(item["predicate"])
    except ValueError as exc:
        raise _SkipItem(str(exc)) from None
    evidence = item["evidence"]
    if not isinstance(evidence, list) or not evidence:
        raise _SkipItem(f"evidence must be a non-empty list of node ids, not {_shown(evidence)}")
    for node in evidence:
        if not isinstance(node, str) or node not in batch:
            raise _SkipItem(f"evidence {_shown(node)} is not a record of this batch")
    many = item["many"]
    if not isinstance(many, bool):
        raise _SkipItem(f"many must be true or false, not {_shown(many)}")
    confidence = item["confidence"]
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not math.isfinite(confidence)
    ):
        raise _SkipItem(f"confidence must be a number, not {_shown(confidence)}")
    valid_from = _date(item["valid_from"])
    if valid_from is None:
        times = [t for t in (batch[n].time_start for n in evidence) if t is not None]
        valid_from = min(times) if times else None
    try:
        return statement(
            subject,
            item["predicate"],
            item["object"],
            valid_from=valid_from,
            evidence=evidence,
            confidence=min(1.0, max(0.0, float(confidence))),
            origin="model",
            many=many,
        )
    except ValueError as exc:
        raise _SkipItem(str(exc)) from None


def _date(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _ISO_DATE.match(value.strip()):
        raise _SkipItem(f"valid_from must be null or an ISO 8601 date or time, not {_shown(value)}")
    try:
        return as_utc(datetime.fromisoformat(value.strip().replace("Z", "+00:00")))
    except ValueError:
        raise _SkipItem(f"valid_from {_shown(value)} is not a date") from None


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
