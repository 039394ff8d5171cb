"""The store's tables, their SQL written once for both backends.

Each module is one role's tables (``sources``, ``records``, ``items``, ``vectors``, ``graph``,
``aliases``, ``principals``, ``locks``, ``facts``, ``rollups``, ``trees``, ``jobs``, the entity
``postings``) as a class that the SQLite and the PostgreSQL store both put together. A
statement is plain SQL where the engines agree and takes the rest from ``self.dialect``
(:mod:`stratamem.store.dialect`); nothing here imports a driver or a backend's module.
"""
