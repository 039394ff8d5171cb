"""What is true, not only what was written: bitemporal facts (:mod:`.facts`), reconciled so
that nothing is ever deleted by an update. See ``docs/memory.md``."""
