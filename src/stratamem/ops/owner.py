"""The owner's operations: principals, access scopes, locks and consolidation.

Listed and callable only for the store's owner (on a server: a call without a token where
tokens are not required, or over stdio) and, on a server, only where writes are on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import stratamem.ops.params as p
from stratamem.ops.context import Context
from stratamem.ops.spec import Operation, Param
from stratamem.types import Principal, rfc3339

NAME = Param("name", "str", "The principal's name.", min_length=1, max_length=64)
SOURCE = Param("source", "str", "A source id or scope.", min_length=1, max_length=p.MAX_NAME)
SCOPES = Param(
    "scopes",
    "strs",
    "Access scopes (* for every source that has one).",
    min_length=1,
    max_length=64,
    max_items=100,
)


def principal_dict(found: Principal) -> dict[str, Any]:
    return {
        "name": found.name,
        "scopes": list(found.scopes),
        "sources": list(found.sources),
        "write": found.write,
        "created_at": rfc3339(found.created_at),
        "rotated_at": rfc3339(found.rotated_at),
    }


def _principals(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.writing() as owner:
        return {"principals": [principal_dict(x) for x in owner.principals.list()]}


PRINCIPALS = Operation(
    name="principals",
    group="principals",
    access="owner",
    description="The principals (agents and services given a token) with their scopes, "
    "source globs and whether they may write.",
    params=(),
    run=_principals,
    cli="principal list",
    python="principals.list",
    query_param=None,
)


def _add_principal(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.writing() as owner:
        token = owner.principals.add(a["name"], a["scopes"], sources=a["sources"], write=a["write"])
        found = next(x for x in owner.principals.list() if x.name == a["name"])
    return {**principal_dict(found), "token": token}


ADD_PRINCIPAL = Operation(
    name="add_principal",
    group="principals",
    access="owner",
    description="Create a principal that reads the sources sharing one of its scopes (and "
    "matching its source globs, if given); answers its bearer token, shown this once.",
    params=(
        NAME,
        SCOPES,
        Param(
            "sources",
            "strs",
            "Source globs that narrow it further.",
            default=(),
            max_length=p.MAX_NAME,
            max_items=100,
        ),
        Param("write", "bool", "It may write (add, remember, ingest, forget).", default=False),
    ),
    run=_add_principal,
    cli="principal add",
    python="principals.add",
    example={"name": "ci-bot", "scopes": ["team"]},
    query_param=None,
)


def _remove_principal(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.writing() as owner:
        owner.principals.remove(a["name"])
    return {"name": a["name"], "removed": True}


REMOVE_PRINCIPAL = Operation(
    name="remove_principal",
    group="principals",
    access="owner",
    description="Remove a principal: its token stops working at once.",
    params=(NAME,),
    run=_remove_principal,
    cli="principal remove",
    python="principals.remove",
    destructive=True,
    example={"name": "ci-bot"},
    query_param=None,
)


def _set_access(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.writing() as owner:
        found = owner.sources.set_access(
            a["source"], scopes=a["scopes"], add=a["add"], remove=a["remove"]
        )
    return found.to_dict()


SET_ACCESS = Operation(
    name="set_access",
    group="sources",
    access="owner",
    description="Change a source's access scopes (which principals read it): replace them "
    "(`scopes`), then add and remove some. A source left with none is the owner's alone.",
    params=(
        SOURCE,
        Param(
            "scopes",
            "strs",
            "The scopes, replacing the ones it has.",
            default=None,
            max_length=64,
            max_items=100,
            nullable=True,
        ),
        Param("add", "strs", "Scopes to add.", default=(), max_length=64, max_items=100),
        Param("remove", "strs", "Scopes to remove.", default=(), max_length=64, max_items=100),
    ),
    run=_set_access,
    cli="access",
    python="sources.set_access",
    example={"source": "slack:#eng", "add": ["team"]},
    query_param=None,
)


def _lock(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.writing() as owner:
        report = owner.locks.lock(a["source"], passphrase=a["passphrase"])
    return dataclasses.asdict(report)


PASSPHRASE = Param(
    "passphrase",
    "str",
    "The passphrase (default: STRATAMEM_PASSPHRASE, else the OS keyring's).",
    default=None,
    min_length=1,
    max_length=1024,
)

LOCK = Operation(
    name="lock",
    group="locks",
    access="owner",
    description="Encrypt a source at rest and purge every plaintext trace of it; nothing of "
    "it can be read until unlock.",
    params=(SOURCE, PASSPHRASE),
    run=_lock,
    cli="lock",
    python="locks.lock",
    destructive=True,
    example={"source": "mbox:personal"},
    query_param=None,
)


def _unlock(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.writing() as owner:
        report = owner.locks.unlock(a["source"], passphrase=a["passphrase"])
    return dataclasses.asdict(report)


UNLOCK = Operation(
    name="unlock",
    group="locks",
    access="owner",
    description="Decrypt a locked source for good and restore everything derived from it.",
    params=(SOURCE, PASSPHRASE),
    run=_unlock,
    cli="unlock",
    python="locks.unlock",
    example={"source": "mbox:personal"},
    query_param=None,
)


def _consolidate(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.writing() as owner:
        report = owner.facts.consolidate(min_facts=a["min_facts"], min_score=a["min_score"])
    found: dict[str, Any] = report.to_dict()
    return found


CONSOLIDATE = Operation(
    name="consolidate",
    group="facts",
    access="owner",
    description="Score every fact true now and bring the rollups (a profile card per "
    "entity) up to date.",
    params=(
        Param(
            "min_facts",
            "int",
            "A card for a subject with this many current facts.",
            default=None,
            ge=1,
            le=1_000_000,
        ),
        Param("min_score", "float", "…or with a fact scoring this much.", default=None, ge=0, le=1),
    ),
    run=_consolidate,
    cli="consolidate",
    python="facts.consolidate",
    query_param=None,
)

OWNER = (PRINCIPALS, ADD_PRINCIPAL, REMOVE_PRINCIPAL, SET_ACCESS, LOCK, UNLOCK, CONSOLIDATE)
