"""One ``Model`` over every configured endpoint (rule A20, ``conduit.runtime.models``).

``RoutedModel.stream(..., model=NAME)`` sends the call to the endpoint named ``NAME`` in
``CONDUIT_MODELS`` (asking for that entry's own ``model``); any other name (a tenant's plain
``model``, or None) goes to the ``default`` endpoint as before. Each endpoint has its own
``openai_model.ModelClient`` (its own connection pool, retries and error mapping, rules A12, A17, A18).
"""

from __future__ import annotations

from typing import Any

from conduit.runtime import models
from conduit.runtime.settings import LlmSettings
from conduit.runtime.llm.model import Messages, ModelError, ModelResponse, OnDelta, ShouldStop, ToolSchemas
from conduit.runtime.llm.openai_model import ModelClient


class RoutedModel:
    """Implements ``conduit.runtime.llm.model.Model``; ``clients``: one ``ModelClient`` per configured name.

    Raises ``pydantic.ValidationError`` / ``ValueError`` at construction for a malformed ``CONDUIT_MODELS``."""

    def __init__(self, llm: LlmSettings, http_client: Any = None) -> None:
        self.specs = models.registry(llm)
        self.clients = {name: ModelClient(llm.model_copy(update={
            "openai_base_url": spec.base_url or llm.openai_base_url, "openai_api_key": spec.key(),
            "model": spec.model}), http_client, spec.streaming) for name, spec in self.specs.items()}

    async def stream(self, messages: Messages, tools: ToolSchemas, on_delta: OnDelta,
                     should_stop: ShouldStop | None = None, max_tokens: int | None = None,
                     on_thinking: OnDelta | None = None, model: str | None = None,
                     timeout_s: float | None = None) -> ModelResponse:
        """``ModelClient.stream`` on the endpoint ``model`` names (see the module doc); raises ``ModelError``
        (``model_not_found``) when it names none and no ``default`` endpoint is configured."""
        name = model if model in self.clients else models.DEFAULT
        client = self.clients.get(name)
        if client is None:
            raise ModelError(f"no endpoint for model {model!r}: set OPENAI_BASE_URL or add it to CONDUIT_MODELS",
                             streamed=False, code="model_not_found")
        sent = self.specs[name].model if name == model or model is None else model
        return await client.stream(messages, tools, on_delta, should_stop, max_tokens, on_thinking, sent, timeout_s)
