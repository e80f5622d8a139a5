"""Pure policy rules shared by the services: input guardrails (``guardrails``), secret redaction
(``redaction``) and the consecutive-failure circuit breaker (``breaker``: the orchestrator's model and tools,
the retriever's rerank endpoint and model calls). No I/O, no settings."""
