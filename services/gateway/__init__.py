"""The gateway: HTTP in, Kafka out, task logs streamed back. ``main``/``app`` build it; the routes are grouped by
concern in ``api``, ``streaming``, ``identity``, ``documents``, ``mcp`` and ``openai_compat``."""
