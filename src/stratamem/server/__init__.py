"""Serving a store to agents and services: an HTTP API and an MCP server, both thin over
:class:`~stratamem.server.service.Service` and the Python API."""
