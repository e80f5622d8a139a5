"""Conduit in other agents' protocols: A2A (``a2a_*``: the agent card, JSON-RPC over the ``a2a-sdk``'s dispatcher,
a task's event log as A2A task status and artifact updates) and AG-UI (``agui*``: ``POST /v1/agui``, one run per
request as ``ag-ui-protocol`` events). Both create tasks through ``services.gateway.api.tasks`` and read the same
Redis event log as the SSE routes (docs/a2a.md, docs/agui.md)."""
