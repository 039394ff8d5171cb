from __future__ import annotations

import types

import stratamem.embed


def test_all_is_sorted_and_complete() -> None:
    exported = stratamem.embed.__all__
    public = {
        name
        for name in dir(stratamem.embed)
        if not name.startswith("_")
        and not isinstance(getattr(stratamem.embed, name), types.ModuleType)
    }
    assert exported == sorted(exported)
    assert public == set(exported)
