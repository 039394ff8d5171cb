"""Fixtures of the retrieval tests: the same documents on both backends.

FTS5's own ranking, which the keyword tests compare with, is in ``fts5_reference.py`` beside
this file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suite import BACKENDS, scratch_database


@pytest.fixture
def both_backends(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, str]:
    """A new SQLite store's location and a new PostgreSQL database's, for a test that holds
    the same documents on both and compares them."""
    if "postgresql" not in BACKENDS or "sqlite" not in BACKENDS:
        pytest.skip("compares the two backends: needs both")
    return str(tmp_path / "store.db"), scratch_database(request)
