"""A deterministic, model-free embedder for unit tests: signed feature hashing.

Each text is lower-cased and split into ``\\w+`` words; every word unigram and adjacent bigram
is hashed (blake2b, so the same in every process) to a bucket in ``[0, dim)`` and a sign, the
signed counts are summed and the vector is L2-normalised (Weinberger et al., "Feature Hashing
for Large Scale Multitask Learning", ICML 2009). Texts that share words get similar vectors;
nothing more is meant. A text without words maps to one fixed bucket so that its vector still
has unit norm. The model's prefixes are put before the text, so they change the vector.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from stratamem.embed.base import ModelSpec, Role, Vectors, with_prefix

NAME = "hashing-v1"
_WORDS = re.compile(r"\w+")
_EMPTY = "\x00empty"


@lru_cache(maxsize=65536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dim, 1.0 if value & 1 else -1.0


def _features(text: str) -> list[str]:
    words = _WORDS.findall(text.lower())
    bigrams = [f"{a} {b}" for a, b in itertools.pairwise(words)]
    return words + bigrams or [_EMPTY]


class HashingEmbedder:
    """Feature-hashing embedder; ``spec`` may carry prefixes (its ``dim`` sets the buckets)."""

    def __init__(self, dim: int = 384, *, spec: ModelSpec | None = None) -> None:
        if spec is None:
            spec = ModelSpec(name=NAME, dim=dim)
        if spec.dim < 1:
            raise ValueError(f"dim must be >= 1, got {spec.dim}")
        self.spec = spec

    def embed_batch(self, texts: Sequence[str], *, role: Role = "passage") -> Vectors:
        dim = self.spec.dim
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for row, text in enumerate(with_prefix(self.spec, texts, role)):
            for feature in _features(text):
                bucket, sign = _bucket(feature, dim)
                out[row, bucket] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        # All features may cancel out (rare); such a row is left as the first basis vector.
        zero = norms[:, 0] == 0
        out[zero, 0] = 1.0
        norms[zero] = 1.0
        result: Vectors = out / norms
        return result
