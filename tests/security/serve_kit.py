"""The canary store served over HTTP and MCP with writes on, for the tests of the server's
doors (``test_server``, ``test_item_writes``): a copy of the world's full store, its
principals made again with the write permission and their tokens kept."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import security_kit as kit
from serving import live

from stratamem.server.http import create_app
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S


@dataclass
class Served:
    url: str
    path: str
    file: Path  # the store's file; on PostgreSQL, whose store is no file, one in its place
    root: Path
    service: Service
    tokens: dict[str, str]
    clients: dict[str, httpx.Client]


@contextmanager
def serve_copy(world: kit.CanaryWorld, folder: Path) -> Iterator[Served]:
    """A copy of the canary store in ``folder``, its principals made again with the write
    permission (so that the write routes get past it) and their tokens kept, served by one
    live server (tokens asked for, writes on, ingest root ``folder/root``)."""
    path = world.places.within(folder).copy(world.full, "store")
    file = Path(path)
    if kit.is_postgres(path):
        file = folder / "store" / "store.db"
        file.parent.mkdir()
        file.write_bytes(b"")
    tokens = {}
    with kit.open_memory(path) as owner:
        for p in kit.PRINCIPALS:
            owner.principals.remove(p.name)
            tokens[p.name] = owner.principals.add(
                p.name, list(p.scopes), sources=list(p.sources), write=True
            )
    root = folder / "root"
    root.mkdir()
    with Service(
        path,
        embedder=HashingEmbedder(),
        reranker=kit.OverlapReranker(),
        allow_writes=True,
        ingest_roots=[root],
    ) as service:
        app = create_app(service, access_log=None)
        with live(app) as url:
            clients = {
                name: httpx.Client(
                    base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=PATIENCE_S
                )
                for name, token in tokens.items()
            }
            try:
                yield Served(url, path, file, root, service, tokens, clients)
            finally:
                for client in clients.values():
                    client.close()
