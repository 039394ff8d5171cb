"""The SQLite backend: every SQL statement stratamem runs, one module per store role."""
