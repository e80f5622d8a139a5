"""The services, each its own process on the bus: gateway, orchestrator, retriever, web, sandbox, mcp.

None imports another; what they share lives in ``conduit`` or ``contracts`` (docs/architecture.md, "Layers").
"""
