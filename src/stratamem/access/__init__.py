"""Access control: principals and their scopes, the read gate, and locked (encrypted)
sources. See ``docs/access.md``."""
