"""The built-in connectors, one module each. Each module names its
:class:`~stratamem.ingest.registry.ConnectorSpec`, which :data:`stratamem.plugins.CONNECTORS`
refers to by ``"module:attribute"``, so no connector is imported until one is asked for by
name or a path's connector is detected.
"""
