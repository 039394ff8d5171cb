"""Rewrites of the packaged MiniLM ONNX graph: fold its int8-storage weights, fuse its attention.

Both need the ``onnx`` package (the ``fast`` extra) and change how the model is computed, not
what it computes:

- :func:`dequantized` folds every ``Mul(Cast(int8 initializer), scale initializer)`` into the
  float32 initializer onnxruntime would fold it into anyway, so that the quantizer sees the
  matrix products' weights as constants.
- :func:`fuse_attention` replaces each layer's exported scaled-dot-product attention (three
  projections, reshapes and transposes, a ``Where``-built additive mask, softmax, a NaN guard and
  two batched products: about 30 nodes) by one ``com.microsoft.Attention`` node with the three
  projections packed into one (H, 3H) matrix. onnxruntime's transformer optimizer does not
  recognise the exported pattern (its NaN guard), so it is matched here. The fused kernel
  computes the same sums in another order: vectors agree to ~1e-6 (checked when the graph is
  built, see :func:`check_same`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
import numpy.typing as npt

MS_DOMAIN = "com.microsoft"
FLOAT = 1  # onnx.TensorProto.FLOAT


def _attribute(node: Any, name: str) -> Any:
    from onnx import helper

    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return None


def dequantized(model: Any) -> Any:
    """``model`` with every ``Mul(Cast(int8 initializer), scale initializer)`` folded."""
    from onnx import numpy_helper

    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    nodes = list(graph.node)
    consumers: dict[str, int] = {}
    for node in nodes:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1
    casts = {
        node.output[0]: index
        for index, node in enumerate(nodes)
        if node.op_type == "Cast"
        and node.input[0] in initializers
        and consumers.get(node.output[0]) == 1
    }
    folded: list[Any] = []
    drop: set[int] = set()
    for index, node in enumerate(nodes):
        if node.op_type != "Mul" or len(node.input) != 2:
            continue
        weight, scale = node.input
        if weight not in casts or scale not in initializers:
            continue
        cast = nodes[casts[weight]]
        quantized = numpy_helper.to_array(initializers[cast.input[0]])
        factor = numpy_helper.to_array(initializers[scale])
        value = (quantized.astype(np.float32) * factor).astype(np.float32)
        folded.append(numpy_helper.from_array(value, node.output[0]))
        drop.update((index, casts[weight]))
    if not folded:
        return model
    kept = [node for index, node in enumerate(nodes) if index not in drop]
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(folded)
    _drop_unused_initializers(graph)
    return model


class _Graph:
    """Producer and consumer maps over a graph's nodes, and its constant initializers."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.producer = {out: node for node in graph.node for out in node.output}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for node in graph.node:
            for name in node.input:
                self.consumers[name].append(node)
        self.constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}

    def made_by(self, name: str, op_type: str) -> Any:
        node = self.producer.get(name)
        if node is None or node.op_type != op_type:
            raise _NoMatch(f"{name} is not made by {op_type}")
        return node

    def only_consumer(self, name: str, op_type: str) -> Any:
        found = [node for node in self.consumers[name] if node.op_type == op_type]
        if len(found) != 1:
            raise _NoMatch(f"{name} has no single {op_type} consumer")
        return found[0]

    def value(self, name: str) -> npt.NDArray[Any] | None:
        """The constant ``name`` holds: an initializer, or a float ``Cast`` of one times a
        scale (how the packaged graph stores its weights), else None."""
        if name in self.constants:
            constant: npt.NDArray[Any] = self.constants[name]
            return constant
        node = self.producer.get(name)
        if node is None:
            return None
        if node.op_type == "Cast" and _attribute(node, "to") == FLOAT:
            source = self.value(node.input[0])
            return None if source is None else source.astype(np.float32)
        if node.op_type == "Mul" and len(node.input) == 2:
            left, right = (self.value(operand) for operand in node.input)
            if left is not None and right is not None:
                product: npt.NDArray[np.float32] = np.multiply(left, right, dtype=np.float32)
                return product
        return None

    def split_constant(self, node: Any) -> tuple[str, npt.NDArray[Any]]:
        """(the variable input, the constant) of a binary node with one constant input."""
        left, right = node.input
        left_value, right_value = self.value(left), self.value(right)
        if right_value is not None and left_value is None:
            return left, right_value
        if left_value is not None and right_value is None:
            return right, left_value
        raise _NoMatch(f"{node.name or node.op_type} has no single constant input")

    def projection(self, name: str) -> tuple[str, Any, Any, float]:
        """Walk up from a head-split tensor to ``x @ W + b``: (x, W, b, product of scales)."""
        scale = 1.0
        node = self.producer.get(name)
        while node is not None and node.op_type in ("Reshape", "Transpose", "Mul"):
            if node.op_type == "Mul":
                name, factor = self.split_constant(node)
                if factor.size != 1:
                    raise _NoMatch("a head scale is not a scalar")
                scale *= float(factor.reshape(()))
            else:
                name = node.input[0]
            node = self.producer.get(name)
        if node is None or node.op_type != "Add":
            raise _NoMatch(f"{name} is not a biased projection")
        product, bias = self.split_constant(node)
        matmul = self.made_by(product, "MatMul")
        x, weight = matmul.input
        weight_value = self.value(weight)
        if weight_value is None:
            raise _NoMatch("a projection's weight is not constant")
        return x, weight_value, bias, scale


class _NoMatch(Exception):
    """The subgraph is not the exported attention pattern."""


def fuse_attention(model: Any, *, num_heads: int, mask_input: str = "attention_mask") -> int:
    """Replace each exported attention block of ``model`` (in place); return how many.

    The block, per layer: ``Q``, ``K``, ``V`` = ``x @ W + b`` split into heads, ``Q`` and ``Kᵀ``
    each scaled by ``d**-0.25``, scores plus a mask (0 or −∞) through a softmax whose NaNs are
    set to 0, times ``V``, heads merged. The fused node gets the padding mask as int32 (1 keeps
    a token), which masks the same keys: onnxruntime adds −10000 to their scores, whose
    exponential is 0 in float32 as −∞'s is.
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    view = _Graph(graph)
    mask32 = f"{mask_input}_int32"
    replaced: dict[int, Any] = {}
    dead_outputs: set[str] = set()
    weights: list[Any] = []
    for softmax in [node for node in graph.node if node.op_type == "Softmax"]:
        try:
            masked = view.made_by(softmax.input[0], "Add")
            scores = next(
                view.producer[name]
                for name in masked.input
                if name in view.producer and view.producer[name].op_type == "MatMul"
            )
            q_x, q_w, q_b, q_scale = view.projection(scores.input[0])
            k_x, k_w, k_b, k_scale = view.projection(scores.input[1])
            guard = view.only_consumer(softmax.output[0], "Where")
            mixed = view.only_consumer(guard.output[0], "MatMul")
            v_x, v_w, v_b, v_scale = view.projection(mixed.input[1])
            merge = view.only_consumer(mixed.output[0], "Transpose")
            merged = view.only_consumer(merge.output[0], "Reshape")
        except (_NoMatch, StopIteration):
            continue
        if not q_x == k_x == v_x or v_scale != 1.0:
            continue
        hidden = q_w.shape[0]
        if q_w.shape != (hidden, hidden) or hidden % num_heads:
            continue
        index = len(weights)
        prefix = f"fused_attention_{index}"
        packed_w = np.concatenate([q_w, k_w, v_w], axis=1).astype(np.float32)
        packed_b = np.concatenate([q_b, k_b, v_b]).astype(np.float32)
        weights += [
            numpy_helper.from_array(packed_w, f"{prefix}_qkv_weight"),
            numpy_helper.from_array(packed_b, f"{prefix}_qkv_bias"),
        ]
        scale = q_scale * k_scale
        attributes: dict[str, Any] = {"num_heads": num_heads}
        if not math.isclose(scale, (hidden // num_heads) ** -0.5, rel_tol=1e-6):
            attributes["scale"] = scale
        replaced[id(merged)] = helper.make_node(
            "Attention",
            [q_x, f"{prefix}_qkv_weight", f"{prefix}_qkv_bias", mask32],
            [merged.output[0]],
            name=prefix,
            domain=MS_DOMAIN,
            **attributes,
        )
        dead_outputs.add(merged.output[0])
    if not replaced:
        return 0
    cast = helper.make_node(
        "Cast", [mask_input], [mask32], name=f"{mask_input}_to_int32", to=6
    )  # 6: TensorProto.INT32
    nodes = [cast] + [replaced.get(id(node), node) for node in graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(weights)
    if not any(opset.domain == MS_DOMAIN for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    _drop_dead_nodes(graph)
    _drop_unused_initializers(graph)
    return len(replaced)


def _drop_dead_nodes(graph: Any) -> None:
    """Remove the nodes no graph output depends on (order kept)."""
    needed = {output.name for output in graph.output}
    live: list[Any] = []
    for node in reversed(list(graph.node)):
        if any(out in needed for out in node.output):
            live.append(node)
            needed.update(name for name in node.input if name)
    del graph.node[:]
    graph.node.extend(reversed(live))


def _drop_unused_initializers(graph: Any) -> None:
    used = {name for node in graph.node for name in node.input}
    used |= {output.name for output in graph.output}
    live = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(live)
