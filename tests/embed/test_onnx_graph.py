"""Rewrites of the packaged MiniLM graph: the fused attention computes what the export did."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from stratamem.embed.onnx_minilm import NUM_HEADS, MiniLMEmbedder, pinned_model

onnx = pytest.importorskip("onnx", reason="the graph rewrites need the onnx package")

from stratamem.embed.onnx_graph import dequantized, fuse_attention  # noqa: E402

INT8 = 3  # onnx.TensorProto.INT8


def ops(model: object) -> list[str]:
    return [node.op_type for node in model.graph.node]  # type: ignore[attr-defined]


def test_each_layer_attention_becomes_one_node() -> None:
    model = onnx.load(str(pinned_model()[0]))
    assert "Softmax" in ops(model)
    assert fuse_attention(model, num_heads=NUM_HEADS) == 6
    names = ops(model)
    assert names.count("Attention") == 6
    assert not {"Softmax", "IsNaN", "Where", "Transpose"} & set(names)
    onnx.checker.check_model(model)
    assert fuse_attention(model, num_heads=NUM_HEADS) == 0  # nothing left to fuse


def test_dequantized_graph_holds_float_weights_and_fuses_the_same_way() -> None:
    packaged = onnx.load(str(pinned_model()[0]))
    int8 = {init.name for init in packaged.graph.initializer if init.data_type == INT8}
    assert int8
    model = dequantized(packaged)
    assert not {init.name for init in model.graph.initializer if init.data_type == INT8}
    assert fuse_attention(model, num_heads=NUM_HEADS) == 6


def test_fused_vectors_equal_the_exported_graph_vectors(minilm: MiniLMEmbedder) -> None:
    """Different lengths in one batch: the fused kernel masks the padding as the export did."""
    unfused = MiniLMEmbedder(fused=False)
    texts = [
        "short",
        "Why did we drop Redis from the stack?",
        "Growth of insulating tissue in young songbird brains. " * 8,
        "The deploy stalled the job queue for two hours. " * 40,  # cut at 256 word pieces
    ]
    for role in ("passage", "query"):
        a = minilm.embed_batch(texts, role=role)
        b = unfused.embed_batch(texts, role=role)
        assert np.abs(a - b).max() < 1e-5


def test_without_onnx_the_file_runs_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = MiniLMEmbedder()
    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` fail
    path = embedder.model_path
    assert embedder._graph(path) == str(path)
    assert MiniLMEmbedder(fused=False)._graph(path) == str(path)
