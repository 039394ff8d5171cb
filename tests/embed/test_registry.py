from __future__ import annotations

from importlib.metadata import EntryPoint
from typing import Any

import numpy as np
import pytest

from stratamem import plugins as plugin_registry
from stratamem.embed import Embedder, HashingEmbedder, ModelSpec, get_embedder, known, registry
from stratamem.embed.onnx_minilm import FastMiniLMEmbedder, MiniLMEmbedder
from stratamem.errors import RegistryError

BUILT_IN = ["hashing", "minilm", "minilm-fast", "openai", "sentence-transformers"]


def test_known_lists_the_built_ins_sorted() -> None:
    names = known()
    assert set(BUILT_IN) <= set(names)
    assert names == sorted(names)


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(RegistryError) as caught:
        get_embedder("no-such-embedder")
    message = str(caught.value)
    assert "'no-such-embedder'" in message
    for name in BUILT_IN:
        assert name in message


def test_options_reach_the_embedder() -> None:
    embedder = get_embedder("hashing", dim=32)
    assert isinstance(embedder, HashingEmbedder)
    assert embedder.embed_batch(["x"]).shape == (1, 32)


def test_minilm_factories_are_lazy() -> None:
    # Making the embedders loads nothing: no model, no quantisation.
    assert isinstance(get_embedder("minilm", batch_size=8), MiniLMEmbedder)
    fast = get_embedder("minilm-fast", cache_dir="/nonexistent/cache")
    assert isinstance(fast, FastMiniLMEmbedder)
    assert fast.spec.name == "all-MiniLM-L6-v2-int8fa"
    earlier = get_embedder("minilm-fast", cache_dir="/nonexistent/cache", fused=False)
    assert earlier.spec.name == "all-MiniLM-L6-v2-int8pc"  # what stores made before hold


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> list[EntryPoint]:
    """Entry points the registry will see, with a fresh registry."""
    found: list[EntryPoint] = []

    def entry_points(*, group: str) -> list[EntryPoint]:
        assert group == "stratamem.embedders"
        return found

    monkeypatch.setattr(plugin_registry, "entry_points", entry_points)
    monkeypatch.setattr(registry, "EMBEDDERS", registry.EMBEDDERS.copy())
    return found


def make_plugin(**options: Any) -> Embedder:
    return HashingEmbedder(spec=ModelSpec("plugin-model", options.get("dim", 8)))


def test_entry_point_plugin(plugins: list[EntryPoint]) -> None:
    plugins.append(EntryPoint("plugin", f"{__name__}:make_plugin", "stratamem.embedders"))
    plugins.append(EntryPoint("minilm", f"{__name__}:make_plugin", "stratamem.embedders"))
    assert "plugin" in known()
    embedder = get_embedder("plugin", dim=4)
    assert embedder.spec.name == "plugin-model"
    assert embedder.embed_batch(["x"]).shape == (1, 4)
    # A plugin never replaces a built-in name.
    assert isinstance(get_embedder("minilm"), MiniLMEmbedder)


def test_broken_plugin_is_a_registry_error(plugins: list[EntryPoint]) -> None:
    plugins.append(EntryPoint("broken", "no_such_module_xyz:factory", "stratamem.embedders"))
    assert "broken" in known()
    with pytest.raises(RegistryError, match=r"'broken' .* failed to load"):
        get_embedder("broken")
    assert isinstance(get_embedder("hashing"), HashingEmbedder)


def test_register(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "EMBEDDERS", registry.EMBEDDERS.copy())
    registry.register("tiny", lambda **options: HashingEmbedder(dim=2))
    assert "tiny" in known()
    assert np.allclose(np.linalg.norm(get_embedder("tiny").embed_batch(["a"]), axis=1), 1)


@pytest.mark.parametrize(
    ("model", "dim", "query_prefix", "passage_prefix"),
    [
        ("intfloat/e5-small-v2", 384, "query: ", "passage: "),
        ("e5-small-v2", 384, "query: ", "passage: "),
        (
            "BAAI/bge-small-en-v1.5",
            384,
            "Represent this sentence for searching relevant passages: ",
            "",
        ),
        ("sentence-transformers/all-MiniLM-L6-v2", 384, "", ""),
        ("all-MiniLM-L6-v2", 384, "", ""),
        ("nomic-embed-text:latest", 768, "search_query: ", "search_document: "),
        ("/models/BAAI/bge-base-en-v1.5/", 768, "Represent", ""),
        ("text-embedding-3-small", 1536, "", ""),
    ],
)
def test_known_models(model: str, dim: int, query_prefix: str, passage_prefix: str) -> None:
    known_spec = registry.known_model(model)
    assert known_spec is not None
    spec = registry.model_spec(model, dim=known_spec.dim)
    assert spec.name == model
    assert spec.dim == dim
    assert spec.query_prefix.startswith(query_prefix)
    assert spec.passage_prefix == passage_prefix


def test_unknown_model_has_no_defaults() -> None:
    assert registry.known_model("acme/secret-embedder") is None
    spec = registry.model_spec("acme/secret-embedder", dim=100)
    assert spec == ModelSpec("acme/secret-embedder", 100)


def test_caller_prefixes_replace_the_table() -> None:
    spec = registry.model_spec("intfloat/e5-small-v2", dim=384, query_prefix="q: ")
    assert (spec.query_prefix, spec.passage_prefix) == ("q: ", "")
    assert registry.model_spec("intfloat/e5-small-v2", dim=384, max_tokens=128).max_tokens == 128
