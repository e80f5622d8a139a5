"""Pure policy rules shared by the gateway and the orchestrator: input guardrails
(``guardrails``) and secret redaction (``redaction``). No I/O, no settings."""
