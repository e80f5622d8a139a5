"""Test support, beside the tests and outside the shipped packages: the scripted OpenAI-compatible model and
reranker, the stack helpers, the fault hook, a test MCP server, a test web site.

Only tests, benches and the entry points' test hooks use it; nothing in ``services`` or the shared runtime
imports it (tests/unit/test_layers.py).
"""
