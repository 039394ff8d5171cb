"""Corrections from the inspector's pages: retract or correct a fact, edit or remove an item,
merge two entities, lock or unlock a source.

Each is a pair of routes under ``/fix/``: a GET that shows, in words, what will change, with
a form (its ``csrf`` field, a Confirm button, a Cancel link), and a POST of that form that runs
the operation every other door runs (``retract``, ``remember``, ``edit``, ``rm``,
``merge_entities``, ``lock``, ``unlock``) through :meth:`Inspector.write`, then answers 303 to
the page that shows the result. The target is named in the query string of both, and is
looked up as the session reads the store: one hidden from it, or missing, answers 404 with
the same line. Who may: as on the API, the owner, or a principal holding the write permission
on what it reads; a lock or unlock the owner only; nobody where writes are off (403). A bad
value (an empty text, a date that does not read, a passphrase typed differently twice or not
opening the source) is one line on the confirmation page, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

import stratamem.server.inspector.views as views
from stratamem.server.inspector.app import Inspector, Refused
from stratamem.server.inspector.session import Session

NO_FACT = "no fact of that id"
NO_ITEM = "no item holds that node"
NO_ENTITY = "no entity of that id"
NO_SOURCE = "no source of that id"
MAX_REF = 1000
# Errors of what was typed, shown on the confirmation page (the rest: an error page).
SHOWN_ON_PAGE = (409, 422)


@dataclass(frozen=True, slots=True)
class Confirmation:
    """What a confirmation page shows: its title, what will change (``change``, in words;
    ``subject`` the thing named in code), what stays (``keeps``), the form's fields, the
    Confirm button's label and where Cancel goes; a ``get`` form (a step before the
    confirmation) sends its ``hidden`` fields."""

    title: str
    change: str
    subject: str
    keeps: str
    fields: tuple[Field, ...]
    confirm: str
    cancel: str
    danger: bool = False
    method: str = "post"
    hidden: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Field:
    """One input of a confirmation's form (``kind``: text, textarea, password)."""

    name: str
    label: str
    kind: str = "text"
    value: str = ""
    hint: str = ""


def add_routes(inspector: Inspector) -> None:
    """The correction routes, each a GET (the confirmation) and a POST (the change)."""
    page = inspector.page
    both = ("GET", "POST")

    def writer(request: Request, *, owner: bool = False) -> Session:
        """The session, where it may make this correction; :class:`Refused` 403 otherwise."""
        session = inspector.reader(request)
        if not inspector.service.allow_writes:
            raise Refused(403, "writes are off: start the server with --allow-writes")
        if not inspector.may_write(session):
            raise Refused(403, f"principal {session.principal!r} may not write")
        if owner and session.principal is not None:
            raise Refused(403, "only the owner locks and unlocks sources")
        return session

    async def confirm(
        request: Request,
        shown: Confirmation,
        *,
        error: str = "",
        status: int = 200,
        values: Mapping[str, str] | None = None,
    ) -> Response:
        fields = tuple(
            Field(f.name, f.label, f.kind, (values or {}).get(f.name, f.value), f.hint)
            if f.kind != "password"
            else f
            for f in shown.fields
        )
        context = {
            "fix": shown,
            "fields": fields,
            "action": request.url.path
            if shown.method == "get"
            else f"{request.url.path}?{request.url.query}",
            "error": error,
        }
        return inspector.render(request, "confirm.html", context, status=status)

    async def run(
        request: Request,
        session: Session,
        shown: Confirmation,
        name: str,
        args: Mapping[str, Any],
        *,
        missing: str,
    ) -> dict[str, Any] | Response:
        """``name`` run as the session's write; a refusal of what was typed as the
        confirmation page again with its line (the fields kept, passphrases not)."""
        try:
            return await inspector.write(session, name, args)
        except Refused as exc:
            if exc.status == 404:
                raise Refused(404, missing) from None
            if exc.status not in SHOWN_ON_PAGE:
                raise
            form = await inspector.form(request)
            return await confirm(request, shown, error=exc.message, status=exc.status, values=form)

    def target(request: Request, name: str, missing: str) -> str:
        value = request.query_params.get(name, "").strip()
        if not value or len(value) > MAX_REF:
            raise Refused(404, missing)
        return value

    # -- facts ---------------------------------------------------------------------------------

    async def fact_of(
        request: Request, session: Session
    ) -> tuple[views.EntityDetail, views.FactEntry]:
        subject = target(request, "subject", NO_FACT)
        fact_id = target(request, "fact", NO_FACT)
        detail = await inspector.memory(session, lambda m: views.entity(m, subject))
        found = None if detail is None else next((f for f in detail.facts if f.id == fact_id), None)
        if detail is None or found is None:
            raise Refused(404, NO_FACT)
        return detail, found

    def timeline_of(subject: str) -> str:
        return "/entities/entity?" + urlencode({"id": subject})

    @page("/fix/retract", methods=both)
    async def retract(request: Request) -> Response:
        session = writer(request)
        detail, fact = await fact_of(request, session)
        shown = Confirmation(
            title="Retract a fact",
            change=f"Retract {statement(fact)} (valid {validity(fact)})?",
            subject=statement(fact),
            keeps="It stays in the history as retracted: no longer believed, never deleted.",
            fields=(),
            confirm="Retract",
            cancel=timeline_of(detail.id) + f"#{fact.id}",
            danger=True,
        )
        if request.method == "GET":
            return await confirm(request, shown)
        done = await run(request, session, shown, "retract", {"fact_id": fact.id}, missing=NO_FACT)
        return done if isinstance(done, Response) else see(timeline_of(detail.id))

    @page("/fix/correct", methods=both)
    async def correct(request: Request) -> Response:
        session = writer(request)
        detail, fact = await fact_of(request, session)
        shown = Confirmation(
            title="Correct a fact",
            change=f"Give {fact.subject} {fact.predicate} a new value, in place of "
            f"{fact.value!r} (valid {validity(fact)})?",
            subject=statement(fact),
            keeps="The old value stays in the history, closed where the new one starts "
            "(superseded), never deleted.",
            fields=(
                Field("value", "New value", value=fact.value),
                Field("valid_from", "Valid from", hint="a date or time; blank: now"),
            ),
            confirm="Correct",
            cancel=timeline_of(detail.id) + f"#{fact.id}",
        )
        if request.method == "GET":
            return await confirm(request, shown)
        form = await inspector.form(request)
        args: dict[str, Any] = {
            "subject": fact.subject,
            "predicate": fact.predicate,
            "object": form.get("value", "").strip(),
            "source": fact.source_id,
            "join": True,
        }
        if form.get("valid_from", "").strip():
            args["valid_from"] = form["valid_from"].strip()
        if not args["object"]:
            return await confirm(
                request, shown, error="give the new value", status=422, values=form
            )
        done = await run(request, session, shown, "remember", args, missing=NO_FACT)
        return done if isinstance(done, Response) else see(timeline_of(detail.id))

    # -- items ---------------------------------------------------------------------------------

    async def item_of(request: Request, session: Session) -> tuple[str, str, dict[str, Any]]:
        """(item id, source scope, node) of the item whose current text is the node named."""
        node_id = target(request, "node", NO_ITEM)
        try:
            node = await inspector.call(session, "show", {"node_id": node_id})
        except Refused as exc:
            if exc.status in (404, 422):
                raise Refused(404, NO_ITEM) from None
            raise
        scope, cite = str(node.get("source", "")), str(node.get("cite", ""))
        if node.get("kind") != "leaf" or not cite.startswith(scope + "#"):
            raise Refused(404, NO_ITEM)
        item_id = cite[len(scope) + 1 :]
        try:
            history = await inspector.call(
                session, "item_history", {"id": item_id, "source": scope}
            )
        except Refused as exc:
            if exc.status in (404, 422):
                raise Refused(404, NO_ITEM) from None
            raise
        current = [v for v in history["versions"] if v.get("closed_at") is None]
        if not current or node_id not in current[-1].get("nodes", ()):
            raise Refused(404, NO_ITEM)
        return item_id, scope, node

    @page("/fix/edit", methods=both)
    async def edit(request: Request) -> Response:
        session = writer(request)
        item_id, scope, node = await item_of(request, session)
        shown = Confirmation(
            title="Edit a memory",
            change=f"Replace the text of item {item_id!r} of {scope}?",
            subject=f"{scope}#{item_id}",
            keeps="Its earlier text stays in the item's history; the id stays the same.",
            fields=(Field("text", "New text", "textarea", value=str(node.get("text", ""))),),
            confirm="Save",
            cancel=f"/nodes/{node['node_id']}",
        )
        if request.method == "GET":
            return await confirm(request, shown)
        form = await inspector.form(request)
        text = form.get("text", "")
        if not text.strip():
            return await confirm(request, shown, error="give the new text", status=422, values=form)
        args = {"id": item_id, "source": scope, "text": text}
        done = await run(request, session, shown, "edit", args, missing=NO_ITEM)
        if isinstance(done, Response):
            return done
        added = done.get("chunks_added") or [node["node_id"]]
        return see(f"/nodes/{added[0]}")

    @page("/fix/remove", methods=both)
    async def remove(request: Request) -> Response:
        session = writer(request)
        item_id, scope, node = await item_of(request, session)
        shown = Confirmation(
            title="Remove a memory",
            change=f"Remove item {item_id!r} of {scope}? It leaves every index at once.",
            subject=f"{scope}#{item_id}",
            keeps="Its text stays in the item's history, as removed.",
            fields=(),
            confirm="Remove",
            cancel=f"/nodes/{node['node_id']}",
            danger=True,
        )
        if request.method == "GET":
            return await confirm(request, shown)
        args = {"id": item_id, "source": scope}
        done = await run(request, session, shown, "rm", args, missing=NO_ITEM)
        if isinstance(done, Response):
            return done
        return see(f"/sources/{done['source_id']}")

    # -- entities ------------------------------------------------------------------------------

    @page("/fix/merge", methods=both)
    async def merge(request: Request) -> Response:
        session = writer(request)
        away = target(request, "entity", NO_ENTITY)
        into = request.query_params.get("into", "").strip()
        first = await inspector.memory(session, lambda m: views.entity(m, away))
        if first is None:
            raise Refused(404, NO_ENTITY)
        if not into:
            shown = Confirmation(
                title="Merge two entities",
                change=f"Merge {first.id} into which entity?",
                subject=first.id,
                keeps="",
                fields=(Field("into", "The entity id it is", hint="e.g. person:maya patel"),),
                confirm="Next",
                cancel=timeline_of(first.id),
                method="get",
                hidden=(("entity", first.id),),
            )
            return await confirm(request, shown)
        if len(into) > MAX_REF:
            raise Refused(404, NO_ENTITY)
        second = await inspector.memory(session, lambda m: views.entity(m, into))
        if second is None:
            raise Refused(404, NO_ENTITY)
        shown = Confirmation(
            title="Merge two entities",
            change=f"Merge {first.id} into {second.id}? {moves(first)} are then read as "
            f"{second.id}, which stays the canonical id.",
            subject=f"{first.id} → {second.id}",
            keeps="The decision is recorded with who made it and when; splitting the two "
            "undoes it.",
            fields=(),
            confirm="Merge",
            cancel=timeline_of(first.id),
        )
        if request.method == "GET":
            return await confirm(request, shown)
        args = {"entity_a": first.id, "entity_b": second.id}
        done = await run(request, session, shown, "merge_entities", args, missing=NO_ENTITY)
        return done if isinstance(done, Response) else see(timeline_of(second.id))

    # -- locks ---------------------------------------------------------------------------------

    async def source_of(request: Request, session: Session) -> views.SourceRow:
        ref = target(request, "source", NO_SOURCE)
        detail = await inspector.memory(session, lambda m: views.source(m, ref))
        if detail is None:
            raise Refused(404, NO_SOURCE)
        return detail.source

    async def lock_or_unlock(request: Request, *, lock: bool) -> Response:
        session = writer(request, owner=True)
        row = await source_of(request, session)
        if row.locked == lock:
            raise Refused(409, f"{row.name} is {'already' if lock else 'not'} locked")
        fields: tuple[Field, ...] = (Field("passphrase", "Passphrase", "password"),)
        if lock:
            fields += (Field("again", "The passphrase again", "password"),)
        shown = Confirmation(
            title="Lock a source" if lock else "Unlock a source",
            change=f"Lock {row.name}? It is encrypted at rest and every plaintext trace of "
            "it purged: nothing of it can be read until it is unlocked with this passphrase."
            if lock
            else f"Unlock {row.name}? It is decrypted for good and everything derived from it "
            "restored.",
            subject=row.name,
            keeps="Keep the passphrase: without it the source cannot be read again."
            if lock
            else "",
            fields=fields,
            confirm="Lock" if lock else "Unlock",
            cancel=f"/sources/{row.id}",
            danger=lock,
        )
        if request.method == "GET":
            return await confirm(request, shown)
        form = await inspector.form(request)
        passphrase = form.get("passphrase", "")
        if not passphrase:
            return await confirm(request, shown, error="give the passphrase", status=422)
        if lock and passphrase != form.get("again", ""):
            return await confirm(
                request, shown, error="the two passphrases differ: type it twice", status=422
            )
        args = {"source": row.id, "passphrase": passphrase}
        try:
            done = await run(
                request, session, shown, "lock" if lock else "unlock", args, missing=NO_SOURCE
            )
        except Refused as exc:
            if not exc.message.startswith(LOCK_REFUSALS):
                raise
            return await confirm(request, shown, error=exc.message, status=422)
        return done if isinstance(done, Response) else see("/sources")

    @page("/fix/lock", methods=both)
    async def lock_page(request: Request) -> Response:
        return await lock_or_unlock(request, lock=True)

    @page("/fix/unlock", methods=both)
    async def unlock_page(request: Request) -> Response:
        return await lock_or_unlock(request, lock=False)


# A lock's or unlock's refusal of the passphrase given (a LockError or ValueError of the
# store's, which the API answers 500 or 422), shown on the page.
LOCK_REFUSALS = ("wrong passphrase", "the passphrase")


def see(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


def statement(fact: views.FactEntry) -> str:
    """A fact in words: ``alice works_at Acme``."""
    return f"{fact.subject} {fact.predicate} {fact.value}"


def validity(fact: views.FactEntry) -> str:
    """When a fact holds: ``2024-01-05 → now``."""
    start = views.when(fact.valid_from) if fact.valid_from else "as far back as known"
    end = views.when(fact.valid_to) if fact.valid_to else "now"
    return f"{start} → {end}"


def moves(entity: views.EntityDetail) -> str:
    """What of an entity a merge moves, in words: ``Its 3 mentions, 2 facts and 1 other id``."""
    parts = [plural(entity.mentions, "mention"), plural(len(entity.facts), "fact")]
    if entity.aliases:
        parts.append(plural(len(entity.aliases), "other id"))
    return "Its " + ", ".join(parts[:-1]) + " and " + parts[-1]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
