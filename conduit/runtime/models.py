"""Named model endpoints (issue 29; rule A20, docs/architecture.md "Named models").

``CONDUIT_MODELS`` is a JSON list of ``ModelSpec`` objects; the single-endpoint settings
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``CONDUIT_MODEL``) stay the model named ``default``
(a ``CONDUIT_MODELS`` entry named ``default`` replaces it). ``registry(settings.llm)`` gives them all
by name, ``spec(settings.llm, name)`` one of them or ``UnknownModel``.

A tenant's chain (``chain``, rule A21) is its primary (``TenantPolicy.model`` when it names a
configured model, else ``default``) and then its fallbacks (``TenantPolicy.fallbacks``, else
``CONDUIT_MODEL_FALLBACKS``), configured ones only, each once; the models it may pick per request
(``allowed``) are its ``models`` list (None: every configured model) plus its chain.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from conduit.runtime.settings import LlmSettings, Settings
from conduit.runtime.tenants import policy

DEFAULT = "default"
"""The name of the model the single-endpoint settings describe."""
UNKNOWN_MODEL = "unknown_model"
"""The machine-readable code of a request naming a model its tenant does not have (HTTP 400)."""


class UnknownModel(ValueError):
    """A model name no ``CONDUIT_MODELS`` entry (or its tenant) has; ``name`` and ``known`` (names)."""

    code = UNKNOWN_MODEL

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown model {name!r}; this tenant's models: {', '.join(known) or 'none'}")
        self.name, self.known = name, known


class ModelSpec(BaseModel):
    """One named OpenAI-compatible endpoint and what it can do.

    ``base_url`` ends in ``/v1`` for most servers; the key is ``api_key`` or read from the
    environment variable ``api_key_env`` (never logged); ``model`` is the name sent in each request;
    ``tools``: it calls tools (a model without them answers only chit-chat, a supervisor's final
    rewrite and summaries, rule A21);
    ``streaming``: it streams (False: each call asks for one JSON reply, ``stream: false``);
    ``reasoning``: it sends reasoning (shown by ``GET /v1/models``; read whenever it comes); ``context_chars``: history it takes
    (characters; None = ``CONDUIT_CONTEXT_WINDOW_CHARS``; a step on it sends at most that much).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    api_key_env: str | None = None
    model: str
    tools: bool = True
    streaming: bool = True
    reasoning: bool = False
    context_chars: int | None = Field(default=None, gt=0)

    def key(self) -> str | None:
        """The API key: ``api_key``, else the value of ``$api_key_env``, else None."""
        return self.api_key or (os.environ.get(self.api_key_env) if self.api_key_env else None)

    def public(self) -> dict[str, object]:
        """What ``GET /v1/models`` shows of it (no URL, no key)."""
        return {"id": self.name, "object": "model", "owned_by": "conduit", "model": self.model, "tools": self.tools,
                "streaming": self.streaming, "reasoning": self.reasoning}


def registry(llm: LlmSettings) -> dict[str, ModelSpec]:
    """Every configured model by name, ``default`` first (when an endpoint is set or a list entry names it).

    Raises ``pydantic.ValidationError`` for a malformed ``CONDUIT_MODELS`` entry and ``ValueError``
    for a name given twice."""
    out: dict[str, ModelSpec] = {}
    if llm.openai_base_url:
        out[DEFAULT] = ModelSpec(name=DEFAULT, base_url=llm.openai_base_url, api_key=llm.openai_api_key,
                                 model=llm.model)
    seen: set[str] = set()
    for raw in llm.models:
        spec = ModelSpec.model_validate(raw)
        if spec.name in seen:
            raise ValueError(f"CONDUIT_MODELS names {spec.name!r} twice")
        seen.add(spec.name)
        out[spec.name] = spec
    return out


def spec(llm: LlmSettings, name: str) -> ModelSpec:
    """The configured model ``name``; raises ``UnknownModel``."""
    known = registry(llm)
    if name not in known:
        raise UnknownModel(name, list(known))
    return known[name]


def chain(settings: Settings, tenant_id: str) -> list[str]:
    """Rule A21: the tenant's configured models in the order they answer: its primary, then its
    fallbacks (unknown names dropped, each name once).

    The primary is the tenant's ``model`` when it names a configured model, else ``default``
    (a tenant ``model`` that names no configured model is a model name sent to ``default``).
    Raises ``pydantic.ValidationError`` for a malformed ``CONDUIT_TENANTS`` entry."""
    own = policy(settings, tenant_id)
    known = registry(settings.llm)
    primary = own.model if own.model in known else DEFAULT
    out: list[str] = []
    for name in [primary, *(own.fallbacks or [])]:
        if name in known and name not in out:
            out.append(name)
    return out


def allowed(settings: Settings, tenant_id: str) -> list[str]:
    """Names of the models the tenant may name per request (rule A20): its ``models`` (None: all) and its chain."""
    known = registry(settings.llm)
    listed = settings.tenancy.tenants.get(tenant_id, {}).get("models")
    names = list(known) if listed is None else [n for n in listed if n in known]
    return names + [n for n in chain(settings, tenant_id) if n not in names]


def pick(settings: Settings, tenant_id: str, name: str | None) -> str | None:
    """Rule A20: the model a request names, checked against its tenant (None: none named, the chain decides).

    Raises ``UnknownModel`` (code ``unknown_model``) when the tenant has no model of that name."""
    if name is None:
        return None
    names = allowed(settings, tenant_id)
    if name not in names:
        raise UnknownModel(name, names)
    return name
