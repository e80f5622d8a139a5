"""The entry points, the top layer: the CLI (``conduit``, ``python -m conduit``), the embedded stack and its
supervisor, local infrastructure, probes, evals, doctor, AsyncAPI and the HTTP client.

The only layer that may import ``services.*``; nothing below imports it (tests/unit/test_layers.py,
docs/architecture.md "Layers").
"""
