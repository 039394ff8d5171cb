"""The memory inspector: server-rendered pages over the operation table."""
