"""The built-in connectors; importing this package registers them."""

from stratamem.ingest.connectors import discord, email, irc, jsonl, markdown, slack

__all__ = ["discord", "email", "irc", "jsonl", "markdown", "slack"]
