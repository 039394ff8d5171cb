from __future__ import annotations

import stratamem


def test_all_is_sorted_and_complete() -> None:
    exported = set(stratamem.__all__)
    public = {name for name in dir(stratamem) if not name.startswith("_")}
    modules = {
        "access",
        "api",
        "cli",
        "config",
        "embed",
        "entities",
        "errors",
        "eval",
        "extras",
        "ingest",
        "memory",
        "ops",
        "plugins",
        "remote",
        "testing",
        "retrieval",
        "server",
        "store",
        "timeparse",
        "tree",
        "types",
    }
    assert stratamem.__all__ == sorted(stratamem.__all__)
    assert public - modules == exported
