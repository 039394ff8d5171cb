"""Keeping the store's vectors in step with its chunks, for one active model.

The store records the signature of the model its vectors were made with (setting
``embed.model``). :func:`embed_pending` embeds the chunks that have no vector yet, in batches,
committing each batch (an interrupted run resumes where it stopped), reusing a vector already
made for the same content (the cache is keyed by model and content sha256). A different
model is refused until :func:`reindex` switches the store over; until then the vector leg
stays off and says why (:func:`vector_status`).

Vectors are float32 little-endian BLOBs of ``dim`` values, L2-normalised.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from stratamem.embed.base import Embedder
from stratamem.errors import ModelMismatchError as ModelMismatchError
from stratamem.store.base import Store
from stratamem.store.vectors import ChunkVector, PendingChunk
from stratamem.types import Chunk

ACTIVE_MODEL = "embed.model"
ACTIVE_DIM = "embed.dim"


@dataclass(slots=True)
class EmbedProgress:
    done: int = 0
    total: int = 0
    cached: int = 0
    started: float = 0.0


@dataclass(slots=True)
class EmbedReport:
    model: str
    embedded: int = 0
    cached: int = 0
    summaries: int = 0
    seconds: float = 0.0


def embed_text(title: str, content: str) -> str:
    """What a chunk's vector is made from: its title (subject, note and heading) and text."""
    if title and title not in content:
        return f"{title}\n{content}"
    return content


NO_VECTORS = "no vectors yet: run `stratamem embed`"


def vector_status(store: Store, embedder: Embedder) -> str | None:
    """Why the vector leg cannot run for this embedder, or None when it can."""
    active = store.get_setting(ACTIVE_MODEL)
    signature = embedder.spec.signature
    if active is None:
        return NO_VECTORS
    if active != signature:
        return (
            f"the store's vectors were made by {active}, the configured model is {signature}: "
            "run `stratamem reindex` to switch"
        )
    return None


def adopt_model(store: Store, embedder: Embedder, *, waiting: int) -> bool:
    """Make ``embedder``'s model the store's, in the caller's transaction, where the store
    has none and no more than ``waiting`` chunks (those the caller is about to embed) lack
    a vector of it; whether it did. A store whose other chunks wait for a vector keeps
    waiting for :func:`embed_pending`, which embeds them all."""
    if store.get_setting(ACTIVE_MODEL) is not None:
        return False
    signature = embedder.spec.signature
    if store.count_pending_embeddings(signature) > waiting:
        return False
    store.set_setting(ACTIVE_MODEL, signature)
    store.set_setting(ACTIVE_DIM, str(embedder.spec.dim))
    return True


def embed_pending(
    store: Store,
    embedder: Embedder,
    *,
    batch: int = 64,
    progress: Callable[[EmbedProgress], None] | None = None,
    sources: Collection[str] | None = None,
) -> EmbedReport:
    """Embed every chunk that has no vector for the active model (set it if none is); of
    these ``sources`` only (ids), where given. ``cached`` counts the chunks whose vector was
    one the model had made for the same text already (of whatever chunk)."""
    signature = embedder.spec.signature
    with store.transaction():
        active = store.get_setting(ACTIVE_MODEL)
        if active is None:
            store.set_setting(ACTIVE_MODEL, signature)
            store.set_setting(ACTIVE_DIM, str(embedder.spec.dim))
        elif active != signature:
            raise ModelMismatchError(
                f"the store's vectors were made by {active}; to use {signature}, run "
                "`stratamem reindex` (it re-embeds every chunk)"
            )
    report = EmbedReport(model=signature)
    wanted = None if sources is None else sorted(set(sources))
    total = (
        store.count_pending_embeddings(signature)
        if wanted is None
        else sum(store.count_pending_embeddings(signature, source=s) for s in wanted)
    )
    state = EmbedProgress(total=total, started=time.time())
    started = time.perf_counter()
    for rows in _pending_batches(store, signature, batch, wanted):
        cached = store.cached_vectors(signature, [r.content_sha256 for r in rows])
        todo = [r for r in rows if r.content_sha256 not in cached]
        if todo:
            # The model runs outside any transaction: writers are never held up by it.
            vectors = embedder.embed_batch(
                [embed_text(r.title, r.content) for r in todo], role="passage"
            )
            fresh = {
                r.content_sha256: np.ascontiguousarray(v, dtype="<f4").tobytes()
                for r, v in zip(todo, vectors, strict=True)
            }
        else:
            fresh = {}
        blobs = {**cached, **fresh}
        dim = embedder.spec.dim
        with store.transaction():
            store.insert_vectors(
                ChunkVector(
                    node_id=r.id,
                    model=signature,
                    source_id=r.source_id,
                    dim=dim,
                    vector=blobs[r.content_sha256],
                    content_sha256=r.content_sha256,
                )
                for r in rows
            )
        report.embedded += len(todo)
        report.cached += len(rows) - len(todo)
        state.done += len(rows)
        state.cached = report.cached
        if progress is not None:
            progress(state)
    report.summaries = embed_summaries(store, embedder, batch=batch)
    report.seconds = time.perf_counter() - started
    return report


def _pending_batches(
    store: Store, signature: str, batch: int, sources: Sequence[str] | None
) -> Iterator[list[PendingChunk]]:
    """The chunks waiting for a vector of ``signature`` (of ``sources`` only, where given),
    ``batch`` at a time, each read going on from the last: no walk past the chunks already
    embedded."""
    if sources is None:
        after = 0
        while rows := store.pending_embeddings(signature, batch, after=after):
            after = rows[-1].rowid
            yield rows
        return
    held: list[PendingChunk] = []
    for source in sources:
        after = 0
        while rows := store.pending_embeddings(signature, batch, after=after, source=source):
            after = rows[-1].rowid
            held.extend(rows)
            while len(held) >= batch:
                yield held[:batch]
                held = held[batch:]
    if held:
        yield held


def embed_chunks(store: Store, embedder: Embedder, ids: Sequence[str]) -> int:
    """Embed these chunks now, in the caller's transaction, when the store's vectors are of
    this embedder's model; returns how many were embedded (0 when the store has no vectors yet
    or they are of another model: the chunks then wait for :func:`embed_pending`)."""
    signature = embedder.spec.signature
    if store.get_setting(ACTIVE_MODEL) != signature:
        return 0
    chunks = store.chunks(ids)
    if not chunks:
        return 0
    vectors = embedder.embed_batch([embed_text(c.title, c.content) for c in chunks], role="passage")
    store.insert_vectors(
        ChunkVector(
            node_id=c.id,
            model=signature,
            source_id=c.source_id,
            dim=embedder.spec.dim,
            vector=np.ascontiguousarray(v, dtype="<f4").tobytes(),
            content_sha256=c.content_sha256,
        )
        for c, v in zip(chunks, vectors, strict=True)
    )
    return len(chunks)


def embed_committed(
    store: Store, embedder: Embedder, ids: Sequence[str], *, batch: int = 64
) -> int:
    """Embed these committed chunks when the store's vectors are of this embedder's model,
    in batches each committed on its own, the model run outside any transaction (a large
    write does not hold other writers up while it runs); chunks embedded or removed
    meanwhile are skipped. Returns how many were embedded."""
    signature = embedder.spec.signature
    done = 0
    for at in range(0, len(ids), batch):
        if store.get_setting(ACTIVE_MODEL) != signature:
            break
        chunks = store.chunks(list(ids[at : at + batch]))
        held = store.vectors_of(signature, [c.id for c in chunks])
        todo = [c for c in chunks if c.id not in held]
        if not todo:
            continue
        texts = [embed_text(c.title, c.content) for c in todo]
        vectors = embedder.embed_batch(texts, role="passage")
        with store.transaction():
            present = store.existing_ids([c.id for c in todo])
            if store.get_setting(ACTIVE_MODEL) != signature:
                break
            rows = [
                ChunkVector(
                    node_id=c.id,
                    model=signature,
                    source_id=c.source_id,
                    dim=embedder.spec.dim,
                    vector=np.ascontiguousarray(v, dtype="<f4").tobytes(),
                    content_sha256=c.content_sha256,
                )
                for c, v in zip(todo, vectors, strict=True)
                if c.id in present
            ]
            store.insert_vectors(rows)
        done += len(rows)
    return done


def vectors_by_text(store: Store, ids: Sequence[str]) -> dict[str, bytes]:
    """The vectors of the active model that these chunks hold, by the text each embeds: read
    before chunks are deleted, for :func:`carry_vectors` to give to their successors."""
    model = store.get_setting(ACTIVE_MODEL)
    if model is None or not ids:
        return {}
    vectors = store.vectors_of(model, ids)
    if not vectors:
        return {}
    return {embed_text(c.title, c.content): vectors[c.id] for c in store.chunks(list(vectors))}


def carry_vectors(store: Store, fresh: Sequence[Chunk], by_text: dict[str, bytes]) -> int:
    """Give ``fresh`` chunks the vectors ``by_text`` holds for the text each embeds (see
    :func:`vectors_by_text`): a passage re-identified or rewritten because something beside
    it changed is not embedded again. Returns how many."""
    model, dim = store.get_setting(ACTIVE_MODEL), store.get_setting(ACTIVE_DIM)
    if model is None or dim is None or not by_text:
        return 0
    carried = [
        ChunkVector(
            node_id=chunk.id,
            model=model,
            source_id=chunk.source_id,
            dim=int(dim),
            vector=blob,
            content_sha256=chunk.content_sha256,
        )
        for chunk in fresh
        if (blob := by_text.get(embed_text(chunk.title, chunk.content))) is not None
    ]
    store.insert_vectors(carried)
    return len(carried)


def embed_summaries(store: Store, embedder: Embedder, *, batch: int = 32) -> int:
    """Embed the sealed summaries that have no vector of this model (they are few: one per
    thousands of tokens of chunks)."""
    signature, dim = embedder.spec.signature, embedder.spec.dim
    done = 0
    while rows := store.trees.unembedded(signature, batch):
        vectors = embedder.embed_batch([content for _, content in rows], role="passage")
        with store.transaction():
            store.trees.insert_vectors(
                (summary_id, signature, dim, np.ascontiguousarray(v, dtype="<f4").tobytes())
                for (summary_id, _), v in zip(rows, vectors, strict=True)
            )
        done += len(rows)
    return done


def reindex(
    store: Store,
    embedder: Embedder,
    *,
    batch: int = 64,
    progress: Callable[[EmbedProgress], None] | None = None,
) -> EmbedReport:
    """Switch the store to ``embedder``'s model: drop other models' vectors, embed all."""
    with store.transaction():
        store.delete_vectors(keep_model=embedder.spec.signature)
        store.trees.delete_vectors(keep_model=embedder.spec.signature)
        store.set_setting(ACTIVE_MODEL, embedder.spec.signature)
        store.set_setting(ACTIVE_DIM, str(embedder.spec.dim))
    return embed_pending(store, embedder, batch=batch, progress=progress)
