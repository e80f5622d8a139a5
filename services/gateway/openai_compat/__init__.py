"""The OpenAI-compatible facade: ``/v1/models`` and ``/v1/chat/completions`` (``chat``), a task's event log as
chat-completion chunks (``chatstream``; docs/openai.md)."""
