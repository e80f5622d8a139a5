"""The A2A routes' paths, apart from the modules that need the ``a2a-sdk`` (rule O13: it loads with the first
A2A request, ``a2a_route``)."""

PATH = "/v1/a2a"
"""The JSON-RPC endpoint's path."""
CARD_PATH = "/.well-known/agent-card.json"
"""Where the agent card is (the SDK's ``AGENT_CARD_WELL_KNOWN_PATH``; tests/unit/test_memory_rules.py compares them)."""
