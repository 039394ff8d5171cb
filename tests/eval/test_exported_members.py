from __future__ import annotations

import stratamem.eval


def test_all_is_complete() -> None:
    modules = {"beir", "calibrate", "datasets", "loading", "locomo", "metrics", "report", "runner"}
    public = {name for name in dir(stratamem.eval) if not name.startswith("_")}
    assert public - modules == set(stratamem.eval.__all__)
    assert len(stratamem.eval.__all__) == len(set(stratamem.eval.__all__))
