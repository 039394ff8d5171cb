"""``mem.trees``: the summary trees, one per source, and their sealing."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence

from stratamem.api._core import Facet
from stratamem.errors import NotFoundError
from stratamem.tree.builder import SealProgress, SealReport, TreeBuilder
from stratamem.types import RetrievalHit, Tree

__all__ = ["Trees"]

_MAX_DEPTH = 64


class Trees(Facet):
    """Seal the queued summaries, flush young buffers, and look at the trees."""

    @property
    def tree_builder(self) -> TreeBuilder:
        """A builder sealing this store's trees with the memory's summarizer and settings."""
        memory = self._memory
        return TreeBuilder(
            memory.store,
            summarizer=memory.summarizer,
            embedder=memory._embedder
            if memory._embedder is not None
            else memory._loaded_embedder(),
            config=memory.tree_config,
        )

    def build(
        self,
        *,
        progress: Callable[[SealProgress], None] | None = None,
        sources: Sequence[str] | None = None,
    ) -> SealReport:
        """Run the queued seal jobs (ingest queues one per changed source); of these
        ``sources`` only (ids or scopes), where given, and then the report says nothing of
        any other."""
        self._owner_only("seal trees")
        trees = None
        if sources is not None:
            found = (self._store.trees.of_source(self._store.resolve_source(s).id) for s in sources)
            trees = [tree.id for tree in found if tree is not None]
        return self.tree_builder.run_pending(progress=progress, trees=trees)

    def flush(
        self,
        sources: Sequence[str] = (),
        *,
        progress: Callable[[SealProgress], None] | None = None,
    ) -> SealReport:
        """Seal every partial level-0 buffer now (of these sources, or all), however young.
        Upper levels still wait for a full fan-out. A tree whose seal job another live
        process holds is left to it: the report's ``held`` names it."""
        self._owner_only("seal trees")
        builder = self.tree_builder
        builder.enqueue(sources, force=True)
        return builder.run_pending(progress=progress)

    def list(self) -> builtins.list[Tree]:
        """The trees of the sources the reader may see."""
        return self._store.trees.all()

    def get(self, source: str) -> Tree:
        """The summary tree of a source (by id or scope)."""
        found = self._store.resolve_source(source)
        tree = self._store.trees.of_source(found.id)
        if tree is None:
            raise NotFoundError(f"source {found.scope!r} has no summary tree yet")
        return tree

    def stats(self, tree_id: str) -> dict[int, tuple[int, int]]:
        """Per level of a tree: (live summaries, how many of them have no parent yet)."""
        return self._store.trees.stats(tree_id)

    def tops(self, tree_id: str) -> builtins.list[RetrievalHit]:
        """A tree's summaries that have no parent yet, highest level first, newest first."""
        return self._memory.nodes(self._store.trees.top_ids(tree_id))

    def ancestors(self, node_id: str) -> builtins.list[RetrievalHit]:
        """The summaries above a node (a chunk or a summary), its tree's top first; nothing
        for a node the reader may not see, a missing one, or one not sealed into a summary."""
        memory = self._memory
        if not memory.nodes([node_id]):
            return []
        trees = self._store.trees
        path: builtins.list[str] = []
        parent = trees.parents_of_chunks([node_id]).get(node_id)
        if parent is None:
            parent = trees.parents_of_summaries([node_id]).get(node_id)
        # A summary's parent is of its own tree: the depth is bounded by the cascade's.
        while parent is not None and parent not in path and len(path) < _MAX_DEPTH:
            path.append(parent)
            parent = trees.parents_of_summaries([parent]).get(parent)
        return memory.nodes(path[::-1])

    def unsealed(self, tree_id: str) -> int:
        """How many chunks wait in a tree's level-0 buffer for the next seal."""
        tree = self._store.trees.get(tree_id)
        if tree is None:
            raise NotFoundError(f"no tree with id {tree_id!r}")
        return len(self._store.trees.leaf_buffer(tree.source_id))
