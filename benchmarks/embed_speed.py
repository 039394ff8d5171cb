"""Embedding speed of the bundled MiniLM variants, interleaved, beside the machine's FLOP floor.

Embeds the first ``--passages`` SciFact passages (title + text, from ``../shared/data``) at batch
32 with each variant in interleaved rounds, so all see the same machine load:

- ``minilm`` as it ran before (the packaged graph, attention unfused): the reference;
- ``minilm`` with each layer's attention fused into one kernel (the default now);
- ``minilm-fast`` as it ran before (per-channel int8, attention unfused, ``…-int8pc``);
- ``minilm-fast`` from the fused graph (per-channel int8 with int8 attention projections,
  ``…-int8fa``, the registry's ``minilm-fast`` now).

It reports passages/s (median and best round), the ratio to the reference, single-query
latency, the cosine of each variant's vectors to the reference's, and the floor: the model's
FLOPs per passage at the measured lengths (attention and feed-forward per layer) against the
machine's sustained fp32 GFLOP/s and int8 GOP/s, measured in the same run with onnxruntime
products of the model's own shapes on the same threads. Also the padding the batches compute
(texts are sorted by length within each call). Writes ``benchmarks/results/embed_speed.json``
and ``embed_speed.md``.

    python benchmarks/embed_speed.py [--passages 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from run_info import git_state, machine
from stratamem.embed.onnx_minilm import FastMiniLMEmbedder, MiniLMEmbedder
from stratamem.embed.tokens import count_tokens_batch

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
RESULTS = ROOT / "benchmarks" / "results"
BATCH = 32
# all-MiniLM-L6-v2: 6 layers, hidden 384, feed-forward 1536.
LAYERS, HIDDEN, FFN = 6, 384, 1536
MAX_PIECES = 256
INDEXING_WINDOW = 64  # chunks per embed_batch call when a store embeds what it lacks


def passages(limit: int) -> list[str]:
    out = []
    with CORPUS.open(encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            out.append(f"{doc.get('title', '')} {doc.get('text', '')}".strip())
            if len(out) == limit:
                break
    return out


def query_ms(embedder: MiniLMEmbedder, queries: list[str]) -> float:
    times = []
    for query in queries:
        started = time.perf_counter()
        embedder.embed_batch([query], role="query")
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def flops(lengths: list[int]) -> tuple[float, float]:
    """(linear, attention) FLOPs to encode texts of these lengths (word pieces with [CLS] and
    [SEP]): per layer and token, 2·(4·H² + 2·H·F) for the projections and the feed-forward,
    2·2·L·H for the scores and the mix (a multiply-add is 2 FLOPs)."""
    linear = sum(LAYERS * n * 2 * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN) for n in lengths)
    attention = sum(LAYERS * n * 2 * 2 * n * HIDDEN for n in lengths)
    return float(linear), float(attention)


def padded(lengths: list[int], window: int) -> int:
    """Tokens computed when each ``window`` texts are sorted by length and cut into batches."""
    total = 0
    for at in range(0, len(lengths), window):
        chunk = sorted(lengths[at : at + window])
        for start in range(0, len(chunk), BATCH):
            batch = chunk[start : start + BATCH]
            total += max(batch) * len(batch)
    return total


def product_rate(kind: str, threads: int, rows: int = 4096, rounds: int = 5) -> float:
    """Sustained G(FL)OP/s of an onnxruntime (rows × H) · (H × F) product, fp32 or u8·s8."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if kind == "fp32":
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        weight = numpy_helper.from_array(rng.standard_normal((HIDDEN, FFN), np.float32), "w")
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, HIDDEN])]
        output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, FFN])
        extra = [weight]
        feed: dict[str, Any] = {"x": rng.standard_normal((rows, HIDDEN), np.float32)}
    else:
        node = helper.make_node("MatMulInteger", ["x", "w", "zero"], ["y"])
        values = rng.integers(-127, 128, (HIDDEN, FFN)).astype(np.int8)
        extra = [
            numpy_helper.from_array(values, "w"),
            numpy_helper.from_array(np.array(128, np.uint8), "zero"),
        ]
        inputs = [helper.make_tensor_value_info("x", TensorProto.UINT8, [rows, HIDDEN])]
        output = helper.make_tensor_value_info("y", TensorProto.INT32, [rows, FFN])
        feed = {"x": rng.integers(0, 256, (rows, HIDDEN)).astype(np.uint8)}
    graph = helper.make_graph([node], "product", inputs, [output], extra)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    session.run(None, feed)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - started)
    return 2 * rows * HIDDEN * FFN / statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds per variant")
    args = parser.parse_args()
    if not CORPUS.is_file():
        raise SystemExit(f"{CORPUS} is missing: the benchmark needs the shared evaluation data")
    load_start = os.getloadavg()
    texts = passages(args.passages)
    queries = [text.split(".")[0][:80] for text in texts[:40]]
    lengths = [min(n + 2, MAX_PIECES) for n in count_tokens_batch(texts)]
    truncated = sum(n + 2 > MAX_PIECES for n in count_tokens_batch(texts))
    threads = os.cpu_count() or 1

    with tempfile.TemporaryDirectory() as cache:
        variants: dict[str, MiniLMEmbedder] = {
            "minilm, before (unfused)": MiniLMEmbedder(batch_size=BATCH, fused=False),
            "minilm (fused attention)": MiniLMEmbedder(batch_size=BATCH),
            "minilm-fast, before (int8pc)": FastMiniLMEmbedder(
                cache_dir=cache, batch_size=BATCH, fused=False
            ),
            "minilm-fast (int8fa)": FastMiniLMEmbedder(cache_dir=cache, batch_size=BATCH),
        }
        reference = next(iter(variants))
        for embedder in variants.values():
            embedder.embed_batch(texts[:BATCH])  # load (and build) and warm up
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        vectors = {}
        rates: dict[str, list[float]] = {"fp32": [], "int8": []}
        for _ in range(args.repeat):
            for name, embedder in variants.items():
                started = time.perf_counter()
                vectors[name] = embedder.embed_batch(texts)
                seconds[name].append(time.perf_counter() - started)
            for kind in rates:
                rates[kind].append(product_rate(kind, threads))
        latency = {name: query_ms(embedder, queries) for name, embedder in variants.items()}
        specs = {name: embedder.spec.name for name, embedder in variants.items()}

    linear, attention = flops(lengths)
    per_passage = (linear + attention) / len(texts)
    fp32_rate = statistics.median(rates["fp32"])
    int8_rate = statistics.median(rates["int8"])
    # Floors: every FLOP at the measured product rate; int8 variants run the linear part at
    # the int8 rate and the attention scores and mix in fp32.
    floor_fp32 = len(texts) / ((linear + attention) / (fp32_rate * 1e9))
    floor_int8 = len(texts) / (linear / (int8_rate * 1e9) + attention / (fp32_rate * 1e9))
    reference_median = statistics.median(seconds[reference])
    rows = {}
    for name in variants:
        median, best = statistics.median(seconds[name]), min(seconds[name])
        cosines = (vectors[name] * vectors[reference]).sum(axis=1)
        floor = floor_int8 if "fast" in name else floor_fp32
        rows[name] = {
            "model_name": specs[name],
            "passages_per_s": round(len(texts) / median, 2),
            "best_passages_per_s": round(len(texts) / best, 2),
            "ratio_to_reference": round(reference_median / median, 2),
            "query_ms_p50": round(latency[name], 2),
            "cosine_to_reference": {
                "mean": round(float(cosines.mean()), 6),
                "min": round(float(cosines.min()), 6),
            },
            "max_abs_difference": float(np.abs(vectors[name] - vectors[reference]).max()),
            "floor_passages_per_s": round(floor, 1),
            "share_of_floor": round(len(texts) / median / floor, 2),
        }
    load_end = os.getloadavg()
    result = {
        "benchmark": "embedding speed of the MiniLM variants",
        "command": f"python benchmarks/embed_speed.py --passages {args.passages} "
        f"--repeat {args.repeat}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, load_end),
        "onnxruntime": onnxruntime.__version__,
        "code": git_state(),
        "corpus": "SciFact corpus.jsonl, title + text",
        "passages": len(texts),
        "batch_size": BATCH,
        "mean_word_pieces": round(float(np.mean(lengths)), 1),
        "truncated_at_256": truncated,
        "padding": {
            f"window_{INDEXING_WINDOW}": round(padded(lengths, INDEXING_WINDOW) / sum(lengths), 3),
            "whole_call": round(padded(lengths, len(lengths)) / sum(lengths), 3),
        },
        "gflop_per_passage": {
            "linear": round(linear / len(texts) / 1e9, 3),
            "attention": round(attention / len(texts) / 1e9, 3),
            "total": round(per_passage / 1e9, 3),
        },
        "product_rates": {
            "fp32_gflops": round(fp32_rate, 1),
            "int8_gops": round(int8_rate, 1),
            "threads": threads,
            "shape": f"4096x{HIDDEN} · {HIDDEN}x{FFN}",
        },
        "variants": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "embed_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Embedding speed of the MiniLM variants, beside the FLOP floor",
        "",
        f"`{result['command']}` on {result['date']}, {threads} CPUs, 1-min load average "
        f"{load_start[0]:.2f} at the start and {load_end[0]:.2f} at the end (the machine is "
        f"shared: compare the ratios, measured in the same interleaved rounds), onnxruntime "
        f"{onnxruntime.__version__}.",
        "",
        f"{len(texts)} SciFact passages (title + text), {result['mean_word_pieces']} word pieces "
        f"on average as encoded, {truncated} cut at {MAX_PIECES}; batch {BATCH}, texts sorted by "
        f"length within each call; median and best of {args.repeat} interleaved rounds. "
        f"Cosine and largest absolute difference are to `{reference}`'s vectors.",
        "",
        "| variant | model name | passages/s | best | × reference | query p50 ms | "
        "cosine mean / min | max abs diff | floor passages/s | of floor |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {name} | `{row['model_name']}` | {row['passages_per_s']} | "
        f"{row['best_passages_per_s']} | {row['ratio_to_reference']}× | {row['query_ms_p50']} | "
        f"{row['cosine_to_reference']['mean']:.6f} / {row['cosine_to_reference']['min']:.6f} | "
        f"{row['max_abs_difference']:.1e} | {row['floor_passages_per_s']} | "
        f"{row['share_of_floor']:.0%} |"
        for name, row in rows.items()
    ]
    gflop = result["gflop_per_passage"]
    lines += [
        "",
        f"**Floor.** One passage at these lengths is {gflop['total']} GFLOP "
        f"({gflop['linear']} in the projections and feed-forward, {gflop['attention']} in the "
        f"attention scores and mix; 6 layers, hidden 384, feed-forward 1536). In the same rounds "
        f"an onnxruntime product of the model's shape (4096×384 · 384×1536) sustained "
        f"{fp32_rate:.1f} GFLOP/s in fp32 and {int8_rate:.1f} GOP/s in u8·s8 on {threads} "
        f"threads: a floor of {floor_fp32:.1f} passages/s for fp32 and {floor_int8:.1f} for "
        f"int8 (its attention scores and mix stay fp32).",
        "",
        f"**Padding.** Sorted by length within each call, the batches compute "
        f"{result['padding'][f'window_{INDEXING_WINDOW}']:.3f}× the real tokens for calls of "
        f"{INDEXING_WINDOW} texts (how a store embeds what it lacks) and "
        f"{result['padding']['whole_call']:.3f}× for one call of all {len(texts)}.",
    ]
    (RESULTS / "embed_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
