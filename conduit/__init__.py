"""The shared runtime, below the services: ``runtime`` (settings, bus, processes, tool services) above
``records`` (Redis records and keys) and ``policy`` (guardrails, redaction, breaker).

It imports only ``contracts``; ``__main__`` (``python -m conduit``) is the thin entry into ``ops.cli``
(docs/architecture.md, "Layers").
"""
