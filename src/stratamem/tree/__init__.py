"""Summary trees: per-source buffers sealed into immutable summaries, level by level."""
