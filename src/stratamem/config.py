"""Typed settings: weight profiles, the search pipeline's and the trees' knobs, with their
defaults; and the layers they are read from at the edge — the per-user and per-store TOML
files, the weights ``tune`` saved in the store, and the environment (see
``docs/environment.md``).

Nothing here reads the environment itself: the CLI passes it in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratamem.errors import ConfigError, RegistryError


@dataclass(frozen=True, slots=True)
class WeightProfile:
    """Leg weights for fusion (they need not sum to 1; fusion normalises what is live)."""

    keyword: float
    vector: float
    graph: float
    freshness: float = 0.0
    freshness_half_life_days: float = 30.0

    def weights(self) -> dict[str, float]:
        return {
            "keyword": self.keyword,
            "vector": self.vector,
            "graph": self.graph,
            "freshness": self.freshness,
        }


PROFILES: dict[str, WeightProfile] = {
    "balanced": WeightProfile(keyword=0.45, vector=0.45, graph=0.10),
    "semantic": WeightProfile(keyword=0.25, vector=0.65, graph=0.10),
    "lexical": WeightProfile(keyword=0.70, vector=0.25, graph=0.05),
    "graph_first": WeightProfile(keyword=0.30, vector=0.30, graph=0.40),
    "recent": WeightProfile(keyword=0.40, vector=0.40, graph=0.05, freshness=0.15),
}


def profile(name: str) -> WeightProfile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise RegistryError(f"unknown weight profile {name!r}; known: {known}") from None


# When MMR diversifies the hits (see docs/search.md): ``on`` always, ``off`` never,
# ``duplicates`` only among near-duplicates (a cosine of at least ``mmr_threshold``), and
# ``auto`` fully among chat turns and only among near-duplicates elsewhere.
MMR_MODES = ("auto", "on", "off", "duplicates")


@dataclass(frozen=True, slots=True)
class SearchConfig:
    """The hybrid pipeline's knobs. ``pool`` candidates are taken from each leg."""

    profile: str = "balanced"
    fusion: str = "minmax"  # or "rrf"
    rrf_k: int = 60
    pool: int = 150
    expand_seeds: int = 5
    expand_damping: float = 0.6
    expand_per_seed: int = 3
    expand_window: int = 2
    context_share: float = 0.4  # of a chat turn's keyword and vector score, to each turn around
    context_window: int = 2  # the turns before and after that receive it
    hub_fraction: float = 0.05
    graph_mode: str = "idf"  # "bm25": graph-BM25 over co-mention neighbours (docs/search.md)
    tier0_boost: float = 1.25
    tier0_tags: tuple[str, ...] = ("pinned", "decision")
    mmr: str = "auto"  # one of MMR_MODES
    mmr_lambda: float = 0.7
    mmr_threshold: float = 0.9
    rerank_top: int = 20
    rerank_timeout_s: float = 5.0
    weights: dict[str, float] = field(default_factory=dict)
    # recall: β of the prior consolidation scores put on facts (0: off; docs/search.md)
    recall_fact_prior: float = 0.0
    # The relevance calibration: "builtin" (the packaged one) or a file `stratamem
    # calibrate` wrote (see stratamem.retrieval.relevance).
    calibration: str = "builtin"

    def __post_init__(self) -> None:
        if not 0.0 <= self.recall_fact_prior <= 1.0:
            raise ValueError(
                f"recall_fact_prior must be within [0, 1], not {self.recall_fact_prior}"
            )
        if self.mmr not in MMR_MODES:
            raise ValueError(f"mmr must be one of {', '.join(MMR_MODES)}, not {self.mmr!r}")
        if not 0.0 <= self.mmr_threshold <= 1.0:
            raise ValueError(f"mmr_threshold must be within [0, 1], not {self.mmr_threshold}")
        if not 0.0 <= self.context_share <= 1.0:
            raise ValueError(f"context_share must be within [0, 1], not {self.context_share}")
        if self.context_window < 0:
            raise ValueError(f"context_window must be 0 or more, not {self.context_window}")

    def leg_weights(self) -> dict[str, float]:
        """The profile's weights, overridden by any explicit ``weights`` (e.g. tuned)."""
        return {**profile(self.profile).weights(), **self.weights}


@dataclass(frozen=True, slots=True)
class TreeConfig:
    """When buffers seal into summaries, and how big summaries are.

    Level 0 (chunks) seals when its buffered tokens reach ``input_token_budget``, or when it
    has gone stale: its oldest item is more than ``flush_age_days`` of source time older than
    the next item, or than the source's newest item (explicit ``flush`` seals it at once).
    Levels ≥ 1 seal every ``summary_fanout`` summaries and are never force-sealed. A cascade
    climbs at most ``max_depth`` levels. Document sources seal each document on its own, and
    pack leaves that belong to no document (records) into runs of the input budget.
    """

    input_token_budget: int = 8000
    summary_fanout: int = 10
    max_depth: int = 32
    flush_age_days: float = 7.0
    output_token_budget: int = 400
    max_entities: int = 32
    max_topics: int = 16

    def __post_init__(self) -> None:
        if self.input_token_budget < 1:
            raise ValueError("input_token_budget must be at least 1")
        if self.summary_fanout < 2:
            raise ValueError("summary_fanout must be at least 2")
        if not 1 <= self.max_depth <= 32:
            raise ValueError("max_depth must be between 1 and 32")
        if self.flush_age_days <= 0:
            raise ValueError("flush_age_days must be positive")
        if self.output_token_budget < 8:
            raise ValueError("output_token_budget must be at least 8")


# -- the config file and the environment -------------------------------------------------------
#
# Every setting has a key, ``section.name``, and is read, lowest first, from: its default; the
# per-user file; the weights ``stratamem tune --save`` recorded in the store; the per-store
# file; the environment; the command's own options. Each value remembers where it came from
# (``stratamem config show``). The environment is passed in, never read here.

USER_FILE = "stratamem/config.toml"  # under $XDG_CONFIG_HOME (default ~/.config)
STORE_FILE_SUFFIX = ".toml"  # beside the store: agent.db → agent.db.toml
TUNED_KEY = "search.tuned"  # the store setting ``tune --save`` writes
LEGS = ("keyword", "vector", "graph", "freshness")


def _weights(value: Any) -> dict[str, float]:
    """``{"keyword": 0.5, ...}`` from a table or ``keyword=0.5,vector=0.4``."""
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, number = part.partition("=")
            if not sep:
                raise ValueError(f"expected leg=weight pairs, got {part!r}")
            pairs[name.strip()] = number.strip()
        value = pairs
    if not isinstance(value, dict) or not value:
        raise ValueError("expected leg weights such as keyword=0.5,vector=0.4,graph=0.1")
    out: dict[str, float] = {}
    for name, number in value.items():
        if name not in LEGS:
            raise ValueError(f"unknown leg {name!r}; legs: {', '.join(LEGS)}")
        try:
            weight = float(number)
        except (TypeError, ValueError):
            raise ValueError(f"weight of {name} is not a number: {number!r}") from None
        if not 0.0 <= weight <= 10.0 or weight != weight:
            raise ValueError(f"weight of {name} must be between 0 and 10, got {number!r}")
        out[name] = weight
    return out


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return text

    return parse


def _positive(kind: type[int] | type[float]) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        number = kind(value)
        if not number > 0:
            raise ValueError(f"expected a positive number, got {value!r}")
        return number

    return parse


def _text(value: Any) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError(f"expected text, got {value!r}")
    return str(value).strip()


def _unit(value: Any) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"expected a number from 0 to 1, got {value!r}")
    return number


_YES = {"1", "true", "yes", "on"}
_NO = {"0", "false", "no", "off"}


def _switch(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _YES | _NO:
        return text in _YES
    raise ValueError(f"expected on or off (true/false, yes/no, 1/0), got {value!r}")


@dataclass(frozen=True, slots=True)
class Key:
    parse: Callable[[Any], Any]
    default: Any
    help: str


KEYS: dict[str, Key] = {
    "embed.model": Key(
        _text,
        "minilm",
        "embedder: a registered name (minilm, hashing, openai, sentence-transformers) or none",
    ),
    "ingest.embed": Key(
        _switch, True, "embed new chunks as `stratamem ingest` ends (--embed/--no-embed)"
    ),
    "rerank.model": Key(_text, "none", "reranker: none, http (a /rerank server) or cross-encoder"),
    "rerank.base_url": Key(_text, "", "the http reranker's server"),
    "rerank.name": Key(_text, "", "the model the reranker asks for or loads"),
    "search.profile": Key(_choice(*PROFILES), "balanced", "fusion weight profile"),
    "search.weights": Key(
        _weights, {}, "leg weights over the profile's (keyword, vector, graph, freshness)"
    ),
    "search.fusion": Key(_choice("minmax", "rrf"), "minmax", "how the legs are fused"),
    "search.mmr": Key(
        _choice(*MMR_MODES),
        "auto",
        "diversification: auto (chat turns; near-duplicates elsewhere), on, off, duplicates",
    ),
    "search.mmr_lambda": Key(_unit, 0.7, "MMR: 1 is relevance only"),
    "search.mmr_threshold": Key(_unit, 0.9, "MMR: the cosine that makes a near-duplicate"),
    "search.graph_mode": Key(
        _choice("idf", "bm25"),
        "idf",
        "graph leg: idf of direct matches, or bm25 over co-mention neighbours",
    ),
    "search.context_share": Key(
        _unit, 0.4, "share of a chat turn's keyword and vector score given to the turns around"
    ),
    "search.context_window": Key(
        _positive(int), 2, "how many turns before and after a chat turn share its score"
    ),
    "search.pool": Key(_positive(int), 150, "candidates taken from each leg"),
    "search.rerank_top": Key(_positive(int), 20, "how many of the top the reranker reorders"),
    "recall.fact_prior": Key(
        _unit, 0.0, "recall: weight of facts' consolidation scores as a prior (0: off)"
    ),
    "search.calibration": Key(
        _text, "builtin", "relevance calibration: builtin, or a file `stratamem calibrate` wrote"
    ),
    "summarizer.name": Key(_choice("extractive", "llm"), "extractive", "who writes summaries"),
    "summarizer.base_url": Key(_text, "", "the llm summarizer's OpenAI-compatible server"),
    "summarizer.model": Key(_text, "", "the llm summarizer's chat model"),
    "tree.input_token_budget": Key(_positive(int), 8000, "tokens that seal a buffer"),
    "tree.output_token_budget": Key(_positive(int), 400, "tokens of a summary"),
    "tree.summary_fanout": Key(_positive(int), 10, "summaries that seal a level"),
    "tree.flush_age_days": Key(_positive(float), 7.0, "source days that make a buffer stale"),
    "chunking.doc_target": Key(_positive(int), 800, "a document chunk's target tokens"),
    "chunking.doc_min": Key(_positive(int), 200, "a document chunk's fewest tokens"),
    "chunking.doc_max": Key(_positive(int), 1200, "a document chunk's most tokens"),
    "chunking.doc_overlap": Key(_positive(int), 80, "tokens document chunks share"),
    "chunking.chat_max_messages": Key(_positive(int), 20, "messages in a chat chunk at most"),
    "chunking.chat_max_chars": Key(_positive(int), 1000, "characters of a chat chunk at most"),
}
# Older variables, still read: the summarizer's.
ENV_ALIASES = {
    "STRATAMEM_SUMMARIZER": "summarizer.name",
    "STRATAMEM_LLM_BASE_URL": "summarizer.base_url",
    "STRATAMEM_LLM_MODEL": "summarizer.model",
}


def env_name(key: str) -> str:
    """``search.weights`` → ``STRATAMEM_SEARCH_WEIGHTS``."""
    return "STRATAMEM_" + key.replace(".", "_").upper()


@dataclass(frozen=True, slots=True)
class Setting:
    value: Any
    origin: str  # default, a file's path, store (tune), env NAME, option --name


class Settings:
    """The effective settings, each with where it came from."""

    def __init__(self, values: dict[str, Setting]) -> None:
        self.values = values

    def __getitem__(self, key: str) -> Any:
        return self.values[key].value

    def origin(self, key: str) -> str:
        return self.values[key].origin

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {k: {"value": s.value, "origin": s.origin} for k, s in sorted(self.values.items())}

    def over(self, layer: Mapping[str, Any], origin: str) -> Settings:
        """These settings with ``layer`` (raw values by key) on top, each checked."""
        values = dict(self.values)
        for key, raw in layer.items():
            values[key] = Setting(_parse(key, raw, origin), origin)
        return Settings(values)

    def search_config(self) -> SearchConfig:
        return SearchConfig(
            profile=self["search.profile"],
            fusion=self["search.fusion"],
            pool=self["search.pool"],
            mmr=self["search.mmr"],
            mmr_lambda=self["search.mmr_lambda"],
            mmr_threshold=self["search.mmr_threshold"],
            graph_mode=self["search.graph_mode"],
            context_share=self["search.context_share"],
            context_window=self["search.context_window"],
            rerank_top=self["search.rerank_top"],
            weights=dict(self["search.weights"]),
            recall_fact_prior=self["recall.fact_prior"],
            calibration=self["search.calibration"],
        )

    def tree_config(self) -> TreeConfig:
        return TreeConfig(
            input_token_budget=self["tree.input_token_budget"],
            output_token_budget=self["tree.output_token_budget"],
            summary_fanout=self["tree.summary_fanout"],
            flush_age_days=self["tree.flush_age_days"],
        )

    def chunking(self) -> dict[str, int]:
        """The chunking sizes that differ from their defaults (for ``ChunkingConfig``), once
        they are checked to agree."""
        low, target, high = (self[f"chunking.doc_{n}"] for n in ("min", "target", "max"))
        if not low <= target <= high or self["chunking.doc_overlap"] >= target:
            said = ", ".join(
                f"{k} {self[k]} ({self.origin(k)})" for k in KEYS if k.startswith("chunking.doc_")
            )
            raise ConfigError(
                "chunking sizes must keep doc_min <= doc_target <= doc_max and doc_overlap "
                f"below doc_target: {said}"
            )
        return {
            key.split(".", 1)[1]: setting.value
            for key, setting in self.values.items()
            if key.startswith("chunking.") and setting.origin != "default"
        }

    def embedder(self) -> str | None:
        name = self["embed.model"]
        return None if name in ("", "none") else name

    def reranker_options(self) -> tuple[str, dict[str, str]] | None:
        """(registered name, options) of the reranker, or None."""
        kind = self["rerank.model"]
        if kind in ("", "none"):
            return None
        options: dict[str, str] = {}
        if self["rerank.base_url"]:
            options["base_url"] = self["rerank.base_url"]
        if self["rerank.name"]:
            options["model"] = self["rerank.name"]
        return kind, options


def _parse(key: str, raw: Any, origin: str) -> Any:
    if key not in KEYS:
        import difflib

        close = difflib.get_close_matches(key, list(KEYS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"{origin}: unknown setting {key!r}{hint}")
    try:
        return KEYS[key].parse(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: {key}: {exc}") from None


def defaults() -> Settings:
    return Settings({key: Setting(spec.default, "default") for key, spec in KEYS.items()})


def read_file(path: Path) -> dict[str, Any]:
    """The settings of a TOML file, flattened to ``section.name``; a missing file is empty."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc}") from None
    flat: dict[str, Any] = {}
    for section, body in data.items():
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: {section!r} must be a [section] of settings")
        for name, value in body.items():
            flat[f"{section}.{name}"] = value
    return flat


def user_file(environ: Mapping[str, str]) -> Path:
    """``$STRATAMEM_CONFIG``, else ``stratamem/config.toml`` in ``$XDG_CONFIG_HOME``
    (default ``~/.config``)."""
    if environ.get("STRATAMEM_CONFIG"):
        return Path(environ["STRATAMEM_CONFIG"]).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / USER_FILE


def store_file(store: str | Path) -> Path | None:
    """The per-store file beside a SQLite file (``agent.db.toml``); None for a store that is
    not a file."""
    from stratamem.store.urls import sqlite_path, url_scheme

    text = str(store)
    if not isinstance(store, Path) and url_scheme(text) is not None:
        if url_scheme(text) != "sqlite":
            return None
        text = sqlite_path(text)
    return None if text == ":memory:" else Path(f"{text}{STORE_FILE_SUFFIX}")


def tuned_layer(raw: str | None) -> tuple[dict[str, Any], str]:
    """The store's tuned weights (``tune --save``) as a layer and its origin."""
    if not raw:
        return {}, ""
    try:
        tuned = json.loads(raw)
        weights = _weights(tuned["weights"])
    except (ValueError, KeyError, TypeError):
        return {}, ""
    said = f"store (tune: {tuned.get('dataset', '?')}, {tuned.get('metric', '?')} "
    said += f"{tuned.get('tune_score', 0):.4f} on tune)"
    return {"search.weights": weights}, said


def load(
    environ: Mapping[str, str],
    *,
    store: str | Path | None = None,
    tuned: str | None = None,
) -> Settings:
    """Every setting from its layers, lowest first: defaults, the user file, the store's
    tuned weights (``tuned``, the raw store setting), the store's file, the environment."""
    settings = defaults()
    path = user_file(environ)
    settings = settings.over(read_file(path), str(path))
    layer, origin = tuned_layer(tuned)
    settings = settings.over(layer, origin)
    beside = store_file(store) if store is not None else None
    if beside is not None:
        settings = settings.over(read_file(beside), str(beside))
    for name, key in ENV_ALIASES.items():
        if environ.get(name, "").strip():
            settings = settings.over({key: environ[name]}, f"env {name}")
    for key in KEYS:
        name = env_name(key)
        if environ.get(name, "").strip():
            settings = settings.over({key: environ[name]}, f"env {name}")
    return settings
