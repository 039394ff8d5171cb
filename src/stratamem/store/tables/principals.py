"""Principals in the store (the ``AccessStore`` role): who may read what, and the
slow hash of each one's token."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from stratamem.errors import AccessDenied
from stratamem.store.access import PrincipalRow
from stratamem.store.base import from_ms, to_ms
from stratamem.store.dialect import Connection, Dialect, Row
from stratamem.types import Principal


class PrincipalTables:
    """The principals half of a store (SQLite\'s or PostgreSQL\'s)."""

    conn: Connection
    dialect: Dialect
    principal_name: str | None
    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[Connection]: ...

    def read_as(self, principal: str | None) -> None:
        if principal is not None and self.get_principal(principal) is None:
            raise AccessDenied(f"no principal named {principal!r}")
        # The caches of what a reader sees are keyed on its name: switching back and forth
        # (a server's thread serving one principal after another) keeps them.
        self.principal_name = principal

    def get_principal(self, name: str) -> Principal | None:
        found = self.principal_row(name=name)
        return None if found is None else found.principal

    def principal_row(
        self, *, name: str | None = None, token_id: str | None = None
    ) -> PrincipalRow | None:
        d = self.dialect
        if (name is None) == (token_id is None):
            raise ValueError("give a name or a token id")
        column, value = ("name", name) if name is not None else ("token_id", token_id)
        row = self.conn.execute(
            f"SELECT * FROM principals WHERE {column} = {d.p}", (value,)
        ).fetchone()
        if row is None:
            return None
        return PrincipalRow(_principal(row), row["token_id"], row["token_hash"])

    def principals(self) -> list[Principal]:
        rows = self.conn.execute("SELECT * FROM principals ORDER BY name").fetchall()
        return [_principal(row) for row in rows]

    def put_principal(self, row: PrincipalRow) -> None:
        d = self.dialect
        p = row.principal
        created = to_ms(p.created_at) or 0
        rotated = to_ms(p.rotated_at) or created
        with self.transaction():
            self.conn.execute(
                f"""INSERT INTO principals
                     (name, scopes, sources, can_write, token_id, token_hash, created_at,
                      rotated_at)
                   VALUES ({d.marks(8)})
                   ON CONFLICT (name) DO UPDATE SET scopes = excluded.scopes,
                     sources = excluded.sources, can_write = excluded.can_write,
                     token_id = excluded.token_id, token_hash = excluded.token_hash,
                     rotated_at = excluded.rotated_at""",
                (
                    p.name,
                    json.dumps(list(p.scopes)),
                    json.dumps(list(p.sources)),
                    int(p.write),
                    row.token_id,
                    row.token_hash,
                    created,
                    rotated,
                ),
            )

    def delete_principal(self, name: str) -> bool:
        d = self.dialect
        with self.transaction():
            cursor = self.conn.execute(f"DELETE FROM principals WHERE name = {d.p}", (name,))
        return cursor.rowcount > 0


def _principal(row: Row) -> Principal:
    return Principal(
        name=row["name"],
        scopes=tuple(json.loads(row["scopes"])),
        sources=tuple(json.loads(row["sources"])),
        write=bool(row["can_write"]),
        created_at=from_ms(row["created_at"]),
        rotated_at=from_ms(row["rotated_at"]),
    )
