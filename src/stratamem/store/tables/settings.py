"""The store's settings table: a key and its text value, and the two counters its writes
bump (see :mod:`stratamem.store.settings`)."""

from __future__ import annotations

from stratamem.store.dialect import Connection, Dialect
from stratamem.store.settings import CHUNK_GENERATION_KEY, GENERATION_KEY


class SettingTables:
    """The settings half of a store (SQLite's or PostgreSQL's)."""

    conn: Connection
    dialect: Dialect

    def get_setting(self, key: str) -> str | None:
        row = self.conn.execute(
            f"SELECT value FROM settings WHERE key = {self.dialect.p}", (key,)
        ).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        p = self.dialect.p
        self.conn.execute(
            f"INSERT INTO settings (key, value) VALUES ({p}, {p}) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def bump_generation(self, *, chunks: bool = True) -> None:
        """Mark vectors changed (and chunks deleted, unless ``chunks=False``), so that
        in-process indexes know they are stale."""
        keys = (GENERATION_KEY, CHUNK_GENERATION_KEY) if chunks else (GENERATION_KEY,)
        self.conn.executemany(
            f"INSERT INTO settings (key, value) VALUES ({self.dialect.p}, '1') "
            "ON CONFLICT (key) "
            "DO UPDATE SET value = CAST(CAST(settings.value AS BIGINT) + 1 AS TEXT)",
            [(key,) for key in keys],
        )

    def generation(self) -> int:
        return int(self.get_setting(GENERATION_KEY) or 0)

    def chunk_generation(self) -> int:
        """Bumped by every chunk deleted: what the keyword index and the entity postings,
        which an append alone leaves current, compare."""
        return int(self.get_setting(CHUNK_GENERATION_KEY) or 0)

    def store_id(self) -> str:
        """The random id this database was given when created: a copy or a restored backup
        keeps it, a new database at the same path gets another. Index files beside the
        database record it and are not used by any other."""
        return self.get_setting("store.id") or ""
