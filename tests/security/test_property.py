"""The contract as a property: for a random small store, a random principal and a random
query, every read of the store equals the same read of the store built from only the
sources that principal may see, written the same way (same texts, ids, times and order, so
chunk ids are equal and rowids keep their order)."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import security_kit as kit
from hypothesis import given, settings
from hypothesis import strategies as st
from security_kit import T0, Item, PrincipalSpec, SourceSpec

from suite import examples

# Words that make every leg find something: plain words for BM25, names, handles, tags,
# addresses and links for the graph, repeated across sources so that statistics are shared.
VOCAB = (
    "queue",
    "redis",
    "sqlite",
    "release",
    "budget",
    "ledger",
    "deploy",
    "Alice Chen",
    "Bob Martins",
    "@carol",
    "@dave",
    "#ops",
    "#launch",
    "carol@example.com",
    "https://wiki.example.com/runbook",
    "QueueWorker",
)
QUERY_WORDS = (*VOCAB, "nothing", "e-mail", "Alice")
ENTITIES = (
    "handle:carol",
    "handle:dave",
    "tag:ops",
    "tag:launch",
    "email:carol@example.com",
    "person:alice chen",
    "topic:queueworker",
    "url:https://wiki.example.com/runbook",
    "topic:nothing",
)
LABELS = ("a", "b", "c")
KINDS = ("chat", "record", "email")

texts = st.lists(st.sampled_from(VOCAB), min_size=2, max_size=9).map(" ".join)


@st.composite
def sources(draw: st.DrawFn) -> list[SourceSpec]:
    count = draw(st.integers(3, 6))
    out = []
    for n in range(count):
        items = tuple(
            Item(
                id=f"s{n}i{i}",
                text=draw(texts),
                time=T0 + timedelta(hours=draw(st.integers(0, 240))),
                author=draw(st.sampled_from([None, "Alice Chen", "Bob Martins"])),
            )
            for i in range(draw(st.integers(1, 4)))
        )
        out.append(
            SourceSpec(
                scopes=(f"s{n}",),
                kind=draw(st.sampled_from(KINDS)),
                access=tuple(draw(st.sets(st.sampled_from(LABELS), max_size=2))),
                items=items,
            )
        )
    return out


principals = st.builds(
    PrincipalSpec,
    name=st.just("pat"),
    scopes=st.sets(st.sampled_from((*LABELS, "*")), min_size=1, max_size=2).map(tuple),
    sources=st.sampled_from([(), ("s1*",), ("s0", "s2"), ("s*",), ("nothing*",)]),
)
queries = st.lists(st.sampled_from(QUERY_WORDS), min_size=1, max_size=3).map(" ".join)


# Examples by backend: each builds two stores, which on a server cost three times what a
# file does.
EXAMPLES = {"sqlite": examples(25), "postgresql": examples(10)}


def test_a_hidden_source_shapes_nothing(places: kit.Places) -> None:
    @settings(max_examples=EXAMPLES[places.backend], deadline=None)
    @given(
        specs=sources(),
        principal=principals,
        query=queries,
        entity=st.sampled_from(ENTITIES),
        source=st.sampled_from(["s0", "s1", "s2", "s5"]),
    )
    def example(
        specs: list[SourceSpec], principal: PrincipalSpec, query: str, entity: str, source: str
    ) -> None:
        shapes_nothing(places, specs, principal, query, entity, source)

    example()


def shapes_nothing(
    places: kit.Places,
    specs: list[SourceSpec],
    principal: PrincipalSpec,
    query: str,
    entity: str,
    source: str,
) -> None:
    """Every read of a store built from ``specs`` equals that of the store built from what
    ``principal`` sees of them."""
    visible = kit.visible_specs(principal, specs)
    with tempfile.TemporaryDirectory() as tmp:
        here = places.within(Path(tmp))
        full, reduced = here.new("full"), here.new("reduced")
        try:
            kit.build(full, specs, [principal], quick_principals=True)
            kit.build(reduced, visible, [principal], quick_principals=True)
            with (
                kit.open_memory(full, principal=principal.name) as a,
                kit.open_memory(reduced, principal=principal.name) as b,
            ):
                got = kit.reads(a, query, entity, source)
                want = kit.reads(b, query, entity, source)
        finally:
            here.drop(full)
            here.drop(reduced)
    tally = kit.counts("property")
    tally.routes.update(got)
    tally.principals.add(repr(principal))
    tally.compared += len(got)
    for name in got:
        kit.assert_same(got[name], want[name], name)
