"""The lean OpenAI-compatible model client, shared by the orchestrator (the agent's streamed calls) and the
retriever (rules K12, K13: its two non-streamed helper calls): ``openai_model.ModelClient`` sends an orjson body
through the SDK's ``post`` and reads the answer raw (``reader``, ``sse``, ``assembler``); ``model`` holds what a
call returns and its errors, ``providererrors`` what a provider's error means (rules A12, A17, A18)."""
