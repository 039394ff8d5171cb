"""Numbered, idempotent schema migrations for the SQLite store.

Times are stored as integer milliseconds since the Unix epoch (UTC). Lists are JSON text.
Each migration runs in its own transaction and bumps ``PRAGMA user_version``; re-running the
list on an up-to-date file does nothing. The runner is :mod:`stratamem.store.migrations`.
"""

from __future__ import annotations

import re
import sqlite3

from stratamem.store.migrations import migrate as run_migrations

MIGRATIONS: tuple[str, ...] = (
    # 1: sources, chunks with their FTS5 index, the entity index and co-mention edges.
    """
    CREATE TABLE IF NOT EXISTS sources (
        id          TEXT PRIMARY KEY,
        scope       TEXT NOT NULL UNIQUE,
        kind        TEXT NOT NULL,
        platform    TEXT NOT NULL,
        location    TEXT NOT NULL,
        title       TEXT NOT NULL DEFAULT '',
        access      TEXT NOT NULL DEFAULT '[]',
        locked      INTEGER NOT NULL DEFAULT 0,
        meta        TEXT NOT NULL DEFAULT '{}',
        ingested_at INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS chunks (
        rowid          INTEGER PRIMARY KEY,
        id             TEXT NOT NULL UNIQUE,
        source_id      TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        seq            INTEGER NOT NULL,
        content        TEXT NOT NULL,
        title          TEXT NOT NULL DEFAULT '',
        token_count    INTEGER NOT NULL,
        author         TEXT,
        ts_start       INTEGER,
        ts_end         INTEGER,
        tags           TEXT NOT NULL DEFAULT '[]',
        source_ref     TEXT NOT NULL DEFAULT '',
        thread         TEXT,
        doc_id         TEXT,
        version        INTEGER NOT NULL DEFAULT 1,
        content_sha256 TEXT NOT NULL,
        parent_summary_id TEXT,
        meta           TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX IF NOT EXISTS chunks_source_seq ON chunks(source_id, seq);
    CREATE INDEX IF NOT EXISTS chunks_time ON chunks(ts_start);
    CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(source_id, doc_id);
    CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
        content, title,
        content = 'chunks', content_rowid = 'rowid',
        tokenize = 'porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, content, title) VALUES (new.rowid, new.content, new.title);
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, content, title)
        VALUES ('delete', old.rowid, old.content, old.title);
    END;
    CREATE TRIGGER IF NOT EXISTS chunks_fts_update AFTER UPDATE OF content, title ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, content, title)
        VALUES ('delete', old.rowid, old.content, old.title);
        INSERT INTO chunks_fts(rowid, content, title) VALUES (new.rowid, new.content, new.title);
    END;
    CREATE TABLE IF NOT EXISTS entity_index (
        entity_id TEXT NOT NULL,
        node_id   TEXT NOT NULL,
        node_kind TEXT NOT NULL DEFAULT 'leaf',
        kind      TEXT NOT NULL,
        surface   TEXT NOT NULL,
        source_id TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        ts        INTEGER,
        PRIMARY KEY (entity_id, node_id)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS entity_index_node ON entity_index(node_id);
    CREATE INDEX IF NOT EXISTS entity_index_source ON entity_index(source_id);
    CREATE TABLE IF NOT EXISTS entity_edges (
        a         TEXT NOT NULL,
        b         TEXT NOT NULL,
        source_id TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        weight    REAL NOT NULL,
        PRIMARY KEY (a, b, source_id)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS entity_edges_b ON entity_edges(b);
    CREATE INDEX IF NOT EXISTS entity_edges_source ON entity_edges(source_id);
    """,
    # 2: vectors per model signature, the embedding cache by content hash, and settings.
    """
    CREATE TABLE IF NOT EXISTS embeddings (
        node_id        TEXT NOT NULL,
        model          TEXT NOT NULL,
        source_id      TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        dim            INTEGER NOT NULL,
        vector         BLOB NOT NULL,
        content_sha256 TEXT NOT NULL,
        PRIMARY KEY (node_id, model)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS embeddings_hash ON embeddings(model, content_sha256);
    CREATE INDEX IF NOT EXISTS embeddings_source ON embeddings(source_id);
    CREATE TABLE IF NOT EXISTS settings (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
    # 3: rank FTS matches by bm25 with the title weighted 0.6 of the body, inside FTS5 itself,
    # so ORDER BY rank LIMIT n runs on the index alone.
    """
    INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('rank', 'bm25(1.0, 0.6)');
    """,
    # 4: summary trees. A tree's buffers are not stored apart: the level-L buffer is the set of
    # its level-L items that have no parent yet (chunks.parent_summary_id, summaries.parent_id),
    # so a seal that sets those parents consumes exactly what it summarised. Summary vectors
    # live apart from chunk vectors so the chunk vector index never sees them. ``jobs`` is the
    # durable queue sealing runs from.
    """
    CREATE TABLE IF NOT EXISTS trees (
        id         TEXT PRIMARY KEY,
        kind       TEXT NOT NULL DEFAULT 'source',
        scope      TEXT NOT NULL,
        source_id  TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        root_id    TEXT,
        max_level  INTEGER NOT NULL DEFAULT 0,
        status     TEXT NOT NULL DEFAULT 'active',
        created_at INTEGER NOT NULL,
        UNIQUE (kind, scope)
    );
    CREATE TABLE IF NOT EXISTS summaries (
        rowid          INTEGER PRIMARY KEY,
        id             TEXT NOT NULL UNIQUE,
        tree_id        TEXT NOT NULL REFERENCES trees(id) ON DELETE CASCADE,
        source_id      TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        level          INTEGER NOT NULL,
        parent_id      TEXT,
        child_ids      TEXT NOT NULL,
        content        TEXT NOT NULL,
        token_count    INTEGER NOT NULL,
        entities       TEXT NOT NULL DEFAULT '[]',
        topics         TEXT NOT NULL DEFAULT '[]',
        ts_start       INTEGER,
        ts_end         INTEGER,
        score          REAL NOT NULL DEFAULT 0,
        sealed_at      INTEGER NOT NULL,
        deleted        INTEGER NOT NULL DEFAULT 0,
        doc_id         TEXT,
        version        INTEGER NOT NULL DEFAULT 1,
        summarizer     TEXT NOT NULL,
        content_sha256 TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS summaries_tree ON summaries(tree_id, level, parent_id);
    CREATE INDEX IF NOT EXISTS summaries_parent ON summaries(parent_id);
    CREATE INDEX IF NOT EXISTS summaries_time ON summaries(ts_start, ts_end);
    CREATE INDEX IF NOT EXISTS summaries_doc ON summaries(tree_id, doc_id);
    CREATE INDEX IF NOT EXISTS chunks_parent ON chunks(parent_summary_id);
    CREATE TABLE IF NOT EXISTS summary_entities (
        entity_id  TEXT NOT NULL,
        summary_id TEXT NOT NULL REFERENCES summaries(id) ON DELETE CASCADE,
        source_id  TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        PRIMARY KEY (entity_id, summary_id)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS summary_entities_summary ON summary_entities(summary_id);
    CREATE TABLE IF NOT EXISTS summary_vectors (
        summary_id     TEXT NOT NULL REFERENCES summaries(id) ON DELETE CASCADE,
        model          TEXT NOT NULL,
        dim            INTEGER NOT NULL,
        vector         BLOB NOT NULL,
        PRIMARY KEY (summary_id, model)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS jobs (
        id          INTEGER PRIMARY KEY,
        kind        TEXT NOT NULL,
        dedupe_key  TEXT NOT NULL UNIQUE,
        payload     TEXT NOT NULL DEFAULT '{}',
        status      TEXT NOT NULL DEFAULT 'pending',
        attempts    INTEGER NOT NULL DEFAULT 0,
        not_before  INTEGER NOT NULL DEFAULT 0,
        last_error  TEXT,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(status, not_before);
    """,
    # 5: job leases apart from ``updated_at``: a running job is held by one claim (``holder``,
    # with its host and pid), whose last renewal is ``leased_at``; ``again`` marks work that
    # arrived while it ran. Jobs left running by an older version count as never renewed, so
    # they are taken again.
    """
    ALTER TABLE jobs ADD COLUMN holder TEXT;
    ALTER TABLE jobs ADD COLUMN holder_host TEXT;
    ALTER TABLE jobs ADD COLUMN holder_pid INTEGER;
    ALTER TABLE jobs ADD COLUMN leased_at INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN again INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET again = 1, payload = json_remove(payload, '$.again')
    WHERE json_extract(payload, '$.again') = 1;
    """,
    # 6: records with identity. Chat, mail and record sources keep what was read as records,
    # one row per (source, key): ``ts`` and ``sort_key`` give their canonical order, ``digest``
    # covers their content, ``body`` is the record (see store/records.py), ``revised`` when it
    # was last edited (where its platform says). A chunk derived from
    # records names the first of them (its anchor) in ``record_key``. The chunks table is
    # rebuilt with AUTOINCREMENT (rowids kept): a rowid is never handed out again, so an item
    # replaced at the end of the table is a removal and an append to the in-process indexes
    # keyed by rowid, not a reused key that makes them rebuild.
    """
    CREATE TABLE IF NOT EXISTS records (
        source_id  TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        key        TEXT NOT NULL,
        ts         INTEGER,
        sort_key   TEXT NOT NULL,
        digest     TEXT NOT NULL,
        body       BLOB NOT NULL,
        revised    INTEGER,
        added_at   INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (source_id, key)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS records_order ON records(source_id, ts, sort_key);
    CREATE TABLE chunks_next (
        rowid          INTEGER PRIMARY KEY AUTOINCREMENT,
        id             TEXT NOT NULL UNIQUE,
        source_id      TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        seq            INTEGER NOT NULL,
        content        TEXT NOT NULL,
        title          TEXT NOT NULL DEFAULT '',
        token_count    INTEGER NOT NULL,
        author         TEXT,
        ts_start       INTEGER,
        ts_end         INTEGER,
        tags           TEXT NOT NULL DEFAULT '[]',
        source_ref     TEXT NOT NULL DEFAULT '',
        thread         TEXT,
        doc_id         TEXT,
        version        INTEGER NOT NULL DEFAULT 1,
        content_sha256 TEXT NOT NULL,
        parent_summary_id TEXT,
        meta           TEXT NOT NULL DEFAULT '{}',
        record_key     TEXT
    );
    INSERT INTO chunks_next (rowid, id, source_id, seq, content, title, token_count, author,
        ts_start, ts_end, tags, source_ref, thread, doc_id, version, content_sha256,
        parent_summary_id, meta)
    SELECT rowid, id, source_id, seq, content, title, token_count, author, ts_start, ts_end,
        tags, source_ref, thread, doc_id, version, content_sha256, parent_summary_id, meta
    FROM chunks;
    DROP TABLE chunks;
    ALTER TABLE chunks_next RENAME TO chunks;
    CREATE INDEX chunks_source_seq ON chunks(source_id, seq);
    CREATE INDEX chunks_time ON chunks(ts_start);
    CREATE INDEX chunks_doc ON chunks(source_id, doc_id);
    CREATE INDEX chunks_parent ON chunks(parent_summary_id);
    CREATE INDEX chunks_record ON chunks(source_id, record_key) WHERE record_key IS NOT NULL;
    CREATE INDEX chunks_derived_time ON chunks(source_id, ts_start) WHERE record_key IS NOT NULL;
    CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, content, title) VALUES (new.rowid, new.content, new.title);
    END;
    CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, content, title)
        VALUES ('delete', old.rowid, old.content, old.title);
    END;
    CREATE TRIGGER chunks_fts_update AFTER UPDATE OF content, title ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, content, title)
        VALUES ('delete', old.rowid, old.content, old.title);
        INSERT INTO chunks_fts(rowid, content, title) VALUES (new.rowid, new.content, new.title);
    END;
    """,
    # 7: access control. Sources ingested before get their kind's default scopes (a chat export
    # ``team``, everything else ``private``). Entities are indexed by (entity, source) too, so
    # that a principal's lookup of an entity visits only the sources it may see. ``principals``
    # holds who may read what and a slow hash of each one's token (``token_id`` is the token's
    # public part, to find the row without trying every hash). A locked source keeps its
    # ``sources`` row; its content lives only in ``sealed`` (AES-256-GCM parts under a key derived
    # from a passphrase with ``locks.kdf``; ``locks.check_value`` tells a wrong passphrase;
    # ``locks.format`` is the sealed format and ``locks.parts`` how many parts it has, see
    # store/tables/locks.py).
    """
    UPDATE sources SET access = CASE WHEN kind = 'chat' THEN '["team"]' ELSE '["private"]' END
    WHERE access = '[]';
    CREATE INDEX IF NOT EXISTS entity_index_entity_source ON entity_index(entity_id, source_id);
    CREATE INDEX IF NOT EXISTS summary_entities_entity_source
        ON summary_entities(entity_id, source_id);
    CREATE TABLE IF NOT EXISTS principals (
        name        TEXT PRIMARY KEY,
        scopes      TEXT NOT NULL DEFAULT '[]',
        sources     TEXT NOT NULL DEFAULT '[]',
        can_write   INTEGER NOT NULL DEFAULT 0,
        token_id    TEXT NOT NULL UNIQUE,
        token_hash  TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        rotated_at  INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS locks (
        source_id   TEXT PRIMARY KEY REFERENCES sources(id) ON DELETE CASCADE,
        kdf         TEXT NOT NULL,
        check_value BLOB NOT NULL,
        format      INTEGER NOT NULL,
        parts       INTEGER NOT NULL,
        locked_at   INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS sealed (
        source_id   TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        part        INTEGER NOT NULL,
        nonce       BLOB NOT NULL,
        data        BLOB NOT NULL,
        PRIMARY KEY (source_id, part)
    );
    """,
    # 8: bitemporal facts (see store/facts.py). Times are milliseconds since the epoch, a
    # missing valid time unbounded at that end; ``expired_at`` NULL is a row believed now;
    # ``single`` 0 is one of a set of values (a predicate of many). A fact belongs to a source
    # and goes with it (forget), and is sealed with it (lock).
    """
    CREATE TABLE IF NOT EXISTS facts (
        id                TEXT PRIMARY KEY,
        source_id         TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        subject           TEXT NOT NULL,
        predicate         TEXT NOT NULL,
        object            TEXT NOT NULL,
        object_is_entity  INTEGER NOT NULL DEFAULT 0,
        valid_from        INTEGER,
        valid_to          INTEGER,
        recorded_at       INTEGER NOT NULL,
        expired_at        INTEGER,
        evidence          TEXT NOT NULL DEFAULT '[]',
        confidence        REAL NOT NULL DEFAULT 1.0,
        origin            TEXT NOT NULL DEFAULT 'asserted',
        single            INTEGER NOT NULL DEFAULT 1
    );
    CREATE INDEX IF NOT EXISTS facts_subject ON facts(subject, predicate, source_id);
    CREATE INDEX IF NOT EXISTS facts_source ON facts(source_id, subject, predicate);
    """,
    # 9: what each fact says, embedded per model signature (little-endian float32), for
    # search_facts; sealed and forgotten with the fact's source.
    """
    CREATE TABLE IF NOT EXISTS fact_vectors (
        fact_id  TEXT NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
        model    TEXT NOT NULL,
        vector   BLOB NOT NULL,
        PRIMARY KEY (fact_id, model)
    ) WITHOUT ROWID;
    """,
    # 10: what consolidation derives (see store/rollups.py): a score per fact, which goes
    # with its fact, and rollups, each removed when any row of its ``rollup_sources`` goes
    # (the source forgotten, by cascade; locked, deleted in the sealing transaction).
    """
    CREATE TABLE IF NOT EXISTS fact_scores (
        fact_id     TEXT PRIMARY KEY REFERENCES facts(id) ON DELETE CASCADE,
        recency     REAL NOT NULL,
        importance  REAL NOT NULL,
        relevance   REAL NOT NULL,
        score       REAL NOT NULL,
        scored_at   INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS rollups (
        id             TEXT PRIMARY KEY,
        subject        TEXT NOT NULL,
        scope          TEXT NOT NULL,
        fact_set_hash  TEXT NOT NULL,
        built_at       INTEGER NOT NULL,
        score          REAL NOT NULL,
        body           TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS rollups_subject ON rollups(subject, scope);
    CREATE TABLE IF NOT EXISTS rollup_sources (
        rollup_id  TEXT NOT NULL REFERENCES rollups(id) ON DELETE CASCADE,
        source_id  TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        PRIMARY KEY (source_id, rollup_id)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS rollup_sources_rollup ON rollup_sources(rollup_id);
    CREATE TRIGGER IF NOT EXISTS rollup_sources_gone AFTER DELETE ON rollup_sources
    BEGIN
        DELETE FROM rollups WHERE id = OLD.rollup_id;
    END;
    """,
    # 11: vectors in rowid tables. A WITHOUT ROWID table is a b-tree of keys whose rows may
    # keep at most about a quarter of a page in place, so each 1.5 KB vector went to an
    # overflow page of its own, mostly empty: 4.7 KB on disk per vector. In a rowid table a
    # row may fill a page, and two vectors share one.
    """
    CREATE TABLE embeddings_rowid (
        node_id        TEXT NOT NULL,
        model          TEXT NOT NULL,
        source_id      TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        dim            INTEGER NOT NULL,
        vector         BLOB NOT NULL,
        content_sha256 TEXT NOT NULL,
        PRIMARY KEY (node_id, model)
    );
    INSERT INTO embeddings_rowid (node_id, model, source_id, dim, vector, content_sha256)
        SELECT node_id, model, source_id, dim, vector, content_sha256 FROM embeddings;
    DROP TABLE embeddings;
    ALTER TABLE embeddings_rowid RENAME TO embeddings;
    CREATE INDEX embeddings_hash ON embeddings(model, content_sha256);
    CREATE INDEX embeddings_source ON embeddings(source_id);
    CREATE TABLE summary_vectors_rowid (
        summary_id     TEXT NOT NULL REFERENCES summaries(id) ON DELETE CASCADE,
        model          TEXT NOT NULL,
        dim            INTEGER NOT NULL,
        vector         BLOB NOT NULL,
        PRIMARY KEY (summary_id, model)
    );
    INSERT INTO summary_vectors_rowid (summary_id, model, dim, vector)
        SELECT summary_id, model, dim, vector FROM summary_vectors;
    DROP TABLE summary_vectors;
    ALTER TABLE summary_vectors_rowid RENAME TO summary_vectors;
    CREATE TABLE fact_vectors_rowid (
        fact_id  TEXT NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
        model    TEXT NOT NULL,
        vector   BLOB NOT NULL,
        PRIMARY KEY (fact_id, model)
    );
    INSERT INTO fact_vectors_rowid (fact_id, model, vector)
        SELECT fact_id, model, vector FROM fact_vectors;
    DROP TABLE fact_vectors;
    ALTER TABLE fact_vectors_rowid RENAME TO fact_vectors;
    """,
    # 12: entity mentions keyed by (entity, source, node), so that the key itself serves a
    # principal's lookup of an entity in the sources it may see, in place of a second index
    # on (entity, source) that repeated every key (a fifth of the mention tables' pages).
    """
    CREATE TABLE entity_index_next (
        entity_id TEXT NOT NULL,
        node_id   TEXT NOT NULL,
        node_kind TEXT NOT NULL DEFAULT 'leaf',
        kind      TEXT NOT NULL,
        surface   TEXT NOT NULL,
        source_id TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        ts        INTEGER,
        PRIMARY KEY (entity_id, source_id, node_id)
    ) WITHOUT ROWID;
    INSERT INTO entity_index_next (entity_id, node_id, node_kind, kind, surface, source_id, ts)
        SELECT entity_id, node_id, node_kind, kind, surface, source_id, ts FROM entity_index;
    DROP TABLE entity_index;
    ALTER TABLE entity_index_next RENAME TO entity_index;
    CREATE INDEX entity_index_node ON entity_index(node_id);
    CREATE INDEX entity_index_source ON entity_index(source_id);
    CREATE TABLE summary_entities_next (
        entity_id  TEXT NOT NULL,
        summary_id TEXT NOT NULL REFERENCES summaries(id) ON DELETE CASCADE,
        source_id  TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        PRIMARY KEY (entity_id, source_id, summary_id)
    ) WITHOUT ROWID;
    INSERT INTO summary_entities_next (entity_id, summary_id, source_id)
        SELECT entity_id, summary_id, source_id FROM summary_entities;
    DROP TABLE summary_entities;
    ALTER TABLE summary_entities_next RENAME TO summary_entities;
    CREATE INDEX summary_entities_summary ON summary_entities(summary_id);
    """,
    # 13: the number of entity mentions, kept by triggers: a reader holding the mentions in
    # memory checks it after another connection's write, where counting them took a tenth of
    # a second at a million chunks, after every write.
    """
    CREATE TABLE IF NOT EXISTS row_counts (
        name TEXT PRIMARY KEY,
        n    INTEGER NOT NULL
    ) WITHOUT ROWID;
    INSERT OR REPLACE INTO row_counts (name, n)
        SELECT 'entity_index', count(*) FROM entity_index;
    CREATE TRIGGER IF NOT EXISTS entity_index_counted_in AFTER INSERT ON entity_index BEGIN
        UPDATE row_counts SET n = n + 1 WHERE name = 'entity_index';
    END;
    CREATE TRIGGER IF NOT EXISTS entity_index_counted_out AFTER DELETE ON entity_index BEGIN
        UPDATE row_counts SET n = n - 1 WHERE name = 'entity_index';
    END;
    """,
    # 14: the versions of items (see store/items.py): one row per (source, key, version), the
    # record as it was in ``body`` (as ``records`` keeps it), what opened it in ``action``
    # (added, edited, removed), its transaction time from ``recorded_at`` to ``closed_at``
    # (NULL: the current version). ``item_nodes`` holds the chunk ids each version was
    # derived into, in order (``seq``), keyed by chunk id so that a chunk id cited before an
    # edit finds its version. Both go with the source (forget) and are sealed with it (lock).
    # The items written before (the records of the sources the items API made, platform
    # ``memory``) get their record as version 1, recorded when the record took its content.
    """
    CREATE TABLE IF NOT EXISTS item_versions (
        source_id   TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        key         TEXT NOT NULL,
        version     INTEGER NOT NULL,
        action      TEXT NOT NULL,
        body        BLOB NOT NULL,
        recorded_at INTEGER NOT NULL,
        closed_at   INTEGER,
        PRIMARY KEY (source_id, key, version)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS item_versions_key ON item_versions(key);
    CREATE TABLE IF NOT EXISTS item_nodes (
        node_id   TEXT NOT NULL,
        source_id TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        key       TEXT NOT NULL,
        version   INTEGER NOT NULL,
        seq       INTEGER NOT NULL,
        PRIMARY KEY (node_id, source_id, key, version)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS item_nodes_item ON item_nodes(source_id, key, version, seq);
    INSERT OR IGNORE INTO item_versions (source_id, key, version, action, body, recorded_at)
        SELECT r.source_id, r.key, 1, 'added', r.body, r.updated_at
        FROM records r JOIN sources s ON s.id = r.source_id
        WHERE s.platform = 'memory';
    INSERT OR IGNORE INTO item_nodes (node_id, source_id, key, version, seq)
        SELECT c.id, c.source_id, c.record_key, 1, c.seq
        FROM chunks c JOIN sources s ON s.id = c.source_id
        WHERE s.platform = 'memory' AND c.record_key IS NOT NULL;
    """,
    # 15: who made each source: a principal's name, NULL for the store's owner. The sources
    # made before count as the owner's.
    """
    ALTER TABLE sources ADD COLUMN created_by TEXT;
    """,
    # 16: entity resolution (see store/resolution.py). ``entity_aliases`` holds what a source
    # states: ``alias`` and ``entity_id`` name one person (a mail From's address and name, a
    # Slack profile's display name and real name), ``origin`` says where it was read; it goes
    # with its source (forget) and is sealed with it (lock). ``entity_merges`` holds what a
    # person decided: ``merge`` (entity_a is entity_b) or ``split`` (an alias a source stated
    # is not to be followed), who and when; undoing one fills ``undone_by``/``undone_at``,
    # so the history stays listable. Its ids are random (store/tables/aliases.py), and the
    # rows naming an id only one source names go with that source (lock, forget).
    """
    CREATE TABLE IF NOT EXISTS entity_aliases (
        alias     TEXT NOT NULL,
        entity_id TEXT NOT NULL,
        source_id TEXT NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
        origin    TEXT NOT NULL,
        PRIMARY KEY (alias, entity_id, source_id)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS entity_aliases_entity ON entity_aliases(entity_id);
    CREATE INDEX IF NOT EXISTS entity_aliases_source ON entity_aliases(source_id);
    CREATE TABLE IF NOT EXISTS entity_merges (
        id         INTEGER PRIMARY KEY,
        action     TEXT NOT NULL,
        entity_a   TEXT NOT NULL,
        entity_b   TEXT NOT NULL,
        made_by    TEXT,
        made_at    INTEGER NOT NULL,
        undone_by  TEXT,
        undone_at  INTEGER
    );
    """,
    # 17: why a model recorded a fact (its decision's reason; see memory/decide.py), empty for
    # every other fact.
    """
    ALTER TABLE facts ADD COLUMN reason TEXT NOT NULL DEFAULT '';
    """,
    # 18: chunks are indexed in FTS5 by the statement that writes them (one INSERT ... SELECT
    # over the new rowids, see store/sqlite/sources.py), not by a trigger row by row: a
    # trigger makes every row a statement of its own, which costs FTS5 a flush of its pending
    # terms each. The delete and update triggers stay.
    """
    DROP TRIGGER IF EXISTS chunks_fts_insert;
    """,
    # 19: a source's mentions and vectors are found through its chunks, not through an index
    # on source_id of their own. Such an index repeats every key of a WITHOUT ROWID table
    # (entity_id, source_id, node_id in every mention), and the foreign key on source_id
    # needed it, else deleting a source scanned the whole table. Both tables lose the foreign
    # key (a source's rows are deleted through its chunks, see store/tables/owned.py) and the
    # index. The edges kept theirs, until migration 22.
    """
    CREATE TABLE entity_index_next (
        entity_id TEXT NOT NULL,
        node_id   TEXT NOT NULL,
        node_kind TEXT NOT NULL DEFAULT 'leaf',
        kind      TEXT NOT NULL,
        surface   TEXT NOT NULL,
        source_id TEXT NOT NULL,
        ts        INTEGER,
        PRIMARY KEY (entity_id, source_id, node_id)
    ) WITHOUT ROWID;
    INSERT INTO entity_index_next (entity_id, node_id, node_kind, kind, surface, source_id, ts)
        SELECT entity_id, node_id, node_kind, kind, surface, source_id, ts FROM entity_index;
    DROP TABLE entity_index;
    ALTER TABLE entity_index_next RENAME TO entity_index;
    CREATE INDEX entity_index_node ON entity_index(node_id);
    CREATE TRIGGER entity_index_counted_in AFTER INSERT ON entity_index BEGIN
        UPDATE row_counts SET n = n + 1 WHERE name = 'entity_index';
    END;
    CREATE TRIGGER entity_index_counted_out AFTER DELETE ON entity_index BEGIN
        UPDATE row_counts SET n = n - 1 WHERE name = 'entity_index';
    END;
    CREATE TABLE embeddings_next (
        node_id        TEXT NOT NULL,
        model          TEXT NOT NULL,
        source_id      TEXT NOT NULL,
        dim            INTEGER NOT NULL,
        vector         BLOB NOT NULL,
        content_sha256 TEXT NOT NULL,
        PRIMARY KEY (node_id, model)
    );
    INSERT INTO embeddings_next (rowid, node_id, model, source_id, dim, vector, content_sha256)
        SELECT rowid, node_id, model, source_id, dim, vector, content_sha256 FROM embeddings;
    DROP TABLE embeddings;
    ALTER TABLE embeddings_next RENAME TO embeddings;
    CREATE INDEX embeddings_hash ON embeddings(model, content_sha256);
    """,
    # 20: vectors made before are found by the first 16 hex digits of their content's digest
    # (64 bits), with the full digest and the model compared on the rows found: an index of
    # (model, full digest) held about 100 bytes of text a vector (11 MiB at 100k chunks).
    """
    DROP INDEX IF EXISTS embeddings_hash;
    CREATE INDEX embeddings_hash ON embeddings(substr(content_sha256, 1, 16));
    """,
    # 21: a chunk names its summary by the summary's rowid, not its id. Sealing a tree sets it
    # after the chunk's row is written: 36 characters of id made each row grow in place and
    # split its page, which left about a sixth of the chunks table empty; an integer grows a
    # row by a few bytes, which the page's spare room holds. The old column stays, always
    # NULL (a byte a row), for the earlier steps that name it.
    """
    ALTER TABLE chunks ADD COLUMN parent_summary INTEGER;
    UPDATE chunks SET parent_summary = (
        SELECT s.rowid FROM summaries s WHERE s.id = chunks.parent_summary_id),
        parent_summary_id = NULL
        WHERE parent_summary_id IS NOT NULL;
    DROP INDEX IF EXISTS chunks_parent;
    CREATE INDEX chunks_parent ON chunks(parent_summary);
    """,
    # 22: no index of the edges by source (16 MiB at 100k chunks). What an ingest takes back
    # is found by its entities (the primary key's first column); what reads a whole source's
    # edges (deleting or locking the source, a principal's count of its edges, a repair)
    # reads the table through, as a store's counts already read its chunks and mentions.
    """
    DROP INDEX IF EXISTS entity_edges_source;
    """,
    # 23: indexes hold only what a lookup can ask for. Chunks are looked up by a document or
    # a time, never by the lack of one: those two indexes leave out the chunks without (in a
    # corpus of documents without times, all of them). A summary's entity rows are deleted
    # by their key, the entities being those the summary's row lists, so the index of them
    # by summary goes.
    """
    DROP INDEX IF EXISTS chunks_doc;
    CREATE INDEX chunks_doc ON chunks(source_id, doc_id) WHERE doc_id IS NOT NULL;
    DROP INDEX IF EXISTS chunks_time;
    CREATE INDEX chunks_time ON chunks(ts_start) WHERE ts_start IS NOT NULL;
    DROP INDEX IF EXISTS summary_entities_summary;
    """,
    # 24: the number of chunks each source holds (``source_counts``): a search's idf reads
    # the chunks its reader may see as a sum over their sources, where counting the chunks
    # themselves after every other connection's write took a tenth of a second at a million.
    # Chunks are counted in by the statement that writes them, as they are indexed in FTS5
    # (see store/sqlite/written.py; a row trigger costs each row a statement), and out by a
    # trigger. A source's row goes with the source.
    """
    CREATE TABLE IF NOT EXISTS source_counts (
        source_id TEXT PRIMARY KEY REFERENCES sources(id) ON DELETE CASCADE,
        chunks    INTEGER NOT NULL
    ) WITHOUT ROWID;
    DELETE FROM source_counts;
    INSERT INTO source_counts (source_id, chunks)
        SELECT source_id, count(*) FROM chunks GROUP BY source_id;
    DROP TRIGGER IF EXISTS chunks_counted_out;
    CREATE TRIGGER chunks_counted_out AFTER DELETE ON chunks BEGIN
        UPDATE source_counts SET chunks = chunks - 1 WHERE source_id = OLD.source_id;
    END;
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


class SqliteSchema:
    """The version is ``PRAGMA user_version``; a step's transaction is ``BEGIN IMMEDIATE``,
    which takes the write lock at once."""

    steps = MIGRATIONS

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def begin(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def apply(self, step: str) -> None:
        for statement in _statements(step):
            if not _column_there(self.conn, statement):
                self.conn.execute(statement)

    def set_version(self, version: int) -> None:
        self.conn.execute(f"PRAGMA user_version = {version}")

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        self.conn.execute("ROLLBACK")


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the file up to :data:`SCHEMA_VERSION`; returns the version it found (see
    :mod:`stratamem.store.migrations`)."""
    return run_migrations(SqliteSchema(conn))


_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", re.IGNORECASE)


def _column_there(conn: sqlite3.Connection, statement: str) -> bool:
    """Whether ``statement`` adds a column the table has already: SQLite's ``ADD COLUMN``
    knows no ``IF NOT EXISTS``, and a migration run again must change nothing."""
    found = _ADD_COLUMN.match(statement)
    if found is None:
        return False
    table, column = found.groups()
    return any(row[1] == column for row in conn.execute(f"PRAGMA table_info({table})"))


def _statements(script: str) -> list[str]:
    """Split a migration into statements; trigger bodies hold semicolons, so use sqlite3's test."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements
