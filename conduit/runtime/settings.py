"""All runtime settings, one group per concern (pydantic-settings).

``Settings`` composes one ``BaseSettings`` per concern (``conduit/runtime/config/``): ``settings.stack``,
``settings.bus``, ``settings.store``, ``settings.gateway``, ``settings.identity``, ``settings.limits``,
``settings.tenancy``, ``settings.llm``, ``settings.router``, ``settings.agent``, ``settings.tools``,
``settings.memory``, ``settings.retrieval``, ``settings.web``, ``settings.sandbox``, ``settings.mcp`` and
``settings.observability`` (docs/architecture.md "Settings per concern"). A service or function takes only the
groups it reads; the root is built once per entry point (``get_settings()``).

Every field is read from an environment variable with the ``CONDUIT_`` prefix and the field's name
(e.g. ``CONDUIT_GATEWAY_PORT`` -> ``settings.gateway.gateway_port``); field names are unique across groups. A few
well-known variables are also accepted without the prefix: ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``,
``QDRANT_URL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``. The README's settings table lists them by group.

Short construction (tests, benches): ``Settings(data_dir=p, redis_url=u)`` puts each keyword in its group, and
``settings.changed(sandbox_timeout_s=3.0)`` is a copy with some fields changed; a group may also be given whole
(``Settings(bus=BusSettings(...))`` or ``Settings(bus={"kafka_partitions": 1})``). Unset fields come from the
environment, as before.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings

from conduit.runtime.config.agent import AgentSettings, LlmSettings, MemorySettings, RouterSettings, ToolSettings
from conduit.runtime.config.base import TimeZoneName, time_zone_name
from conduit.runtime.config.gateway import GatewaySettings, IdentitySettings, LimitsSettings, TenancySettings
from conduit.runtime.config.infra import BusSettings, ObservabilitySettings, StackSettings, StoreSettings
from conduit.runtime.config.retrieval import RetrievalSettings
from conduit.runtime.config.tools import McpSettings, SandboxSettings, WebSettings

__all__ = ["AgentSettings", "BusSettings", "GatewaySettings", "IdentitySettings", "LimitsSettings", "LlmSettings",
           "McpSettings", "MemorySettings", "ObservabilitySettings", "RetrievalSettings", "RouterSettings",
           "SandboxSettings", "Settings", "StackSettings", "StoreSettings", "TenancySettings", "TimeZoneName",
           "ToolSettings", "WebSettings", "get_settings", "settings_table", "time_zone_name"]


def _group(cls: type[BaseSettings]) -> Any:
    return Field(default_factory=functools.partial(_from_environment, cls), description=cls.__doc__)


_BUILT: dict[tuple[type[BaseSettings], tuple[tuple[str, str], ...]], BaseSettings] = {}
"""Groups read from the environment, by class and by the variables they can read (what they read is all they
depend on): a second ``Settings()`` under the same environment copies them instead of parsing it again."""


def _from_environment(cls: type[BaseSettings]) -> BaseSettings:
    """A ``cls`` read from the environment: a copy of the one built under the same ``CONDUIT_*`` and plain
    variables (a group's build costs ~1 ms, its copy ~0.05; the unit tests build ``Settings`` hundreds of times)."""
    key = (cls, tuple(sorted((k.upper(), v) for k, v in os.environ.items() if _readable(k.upper()))))
    built = _BUILT.get(key)
    if built is None:
        if len(_BUILT) > 512:
            _BUILT.clear()
        built = _BUILT[key] = cls()
    return built.model_copy(deep=True)


def _readable(name: str) -> bool:
    return name.startswith("CONDUIT_") or name in _plain_names()


@functools.cache
def _plain_names() -> frozenset[str]:
    """The variables read without the ``CONDUIT_`` prefix (``REDIS_URL``, ``OPENAI_API_KEY``, ...)."""
    return frozenset(c.upper() for cls in GROUPS.values() for f in cls.model_fields.values()
                     for c in getattr(f.validation_alias, "choices", []) if not c.upper().startswith("CONDUIT_"))


class Settings(BaseModel):
    """Conduit settings, one group per concern; see the README table for meaning and defaults.

    Raises ``pydantic.ValidationError`` for a bad value (also one read from the environment) or an unknown keyword.
    """

    model_config = ConfigDict(extra="forbid")

    stack: StackSettings = _group(StackSettings)
    bus: BusSettings = _group(BusSettings)
    store: StoreSettings = _group(StoreSettings)
    gateway: GatewaySettings = _group(GatewaySettings)
    identity: IdentitySettings = _group(IdentitySettings)
    limits: LimitsSettings = _group(LimitsSettings)
    tenancy: TenancySettings = _group(TenancySettings)
    llm: LlmSettings = _group(LlmSettings)
    router: RouterSettings = _group(RouterSettings)
    agent: AgentSettings = _group(AgentSettings)
    tools: ToolSettings = _group(ToolSettings)
    memory: MemorySettings = _group(MemorySettings)
    retrieval: RetrievalSettings = _group(RetrievalSettings)
    web: WebSettings = _group(WebSettings)
    sandbox: SandboxSettings = _group(SandboxSettings)
    mcp: McpSettings = _group(McpSettings)
    observability: ObservabilitySettings = _group(ObservabilitySettings)

    @model_validator(mode="before")
    @classmethod
    def _by_group(cls, data: Any) -> Any:
        """Put each field keyword (``redis_url=...``) in its group; a group given as a dict reads the environment
        for the fields it leaves out. An unknown keyword stays, so ``extra="forbid"`` names it."""
        if not isinstance(data, Mapping):
            return data
        out: dict[str, Any] = {}
        flat: dict[str, dict[str, Any]] = {}
        for key, value in data.items():
            group = FIELD_GROUP.get(key)
            if group is None:
                out[key] = value
            else:
                flat.setdefault(group, {})[key] = value
        for group, fields in flat.items():
            given = out.get(group)
            base = given.model_dump() if isinstance(given, BaseSettings) else dict(given or {})
            out[group] = {**base, **fields}
        for group, value in out.items():
            if isinstance(value, Mapping) and group in GROUPS:
                out[group] = GROUPS[group](**value)
        return out

    def changed(self, changes: Mapping[str, Any] | None = None, /, **fields: Any) -> Settings:
        """A copy with the named fields (any group's, by field name) changed and validated; the rest as here."""
        return Settings(**{name: getattr(self, name) for name in GROUPS}, **{**(changes or {}), **fields})


GROUPS: dict[str, type[BaseSettings]] = {name: f.annotation for name, f in Settings.model_fields.items()}  # type: ignore[misc]
"""Group name (``bus``) -> its settings class (``BusSettings``), in the README's order."""
FIELD_GROUP: dict[str, str] = {field: group for group, cls in GROUPS.items() for field in cls.model_fields}
"""Field name (``redis_url``) -> the group holding it (``store``)."""


@lru_cache
def get_settings() -> Settings:
    """Process-wide settings, read once from the environment."""
    return Settings()


def settings_table() -> str:
    """The README's settings tables (Markdown), one per group, generated from the groups so they cannot drift."""
    out = []
    for group, cls in GROUPS.items():
        rows = [f"**`{group}`** ({cls.__name__}): {cls.__doc__}", "",
                "| variable | default | meaning |", "| --- | --- | --- |"]
        for name, f in cls.model_fields.items():
            env = f"CONDUIT_{name.upper()}"
            plain = [c for c in getattr(f.validation_alias, "choices", []) if c != env]
            also = f" (or `{'`, `'.join(plain)}`)" if plain else ""
            default = f.default.as_posix() if isinstance(f.default, Path) else f.default
            shown = "unset" if default is None else f"`{default}`"
            rows.append(f"| `{env}`{also} | {shown} | {(f.description or '').replace('|', '/')} |")
        out.append("\n".join(rows))
    return "\n\n".join(out)


if __name__ == "__main__":  # `python -m conduit.runtime.settings` prints the README table
    print(settings_table())
