"""The gateway: HTTP in, Kafka out, task logs streamed back. ``main``/``app`` build it; the routes are grouped by
concern in ``api``, ``streaming``, ``identity``, ``documents``, ``mcp``, ``openai_compat`` and ``agents`` (A2A, AG-UI)."""
