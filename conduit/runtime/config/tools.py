"""Settings of the tool services: web, sandbox, MCP servers and remote A2A agents.

Each class is one concern of ``conduit.runtime.settings.Settings``; every field is read from
``CONDUIT_<FIELD>`` (a few also from a plain name, see ``alias``).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from conduit.runtime.config.base import CONFIG


class WebSettings(BaseSettings):
    """The web tools (web_search, web_fetch)."""

    model_config = CONFIG

    searxng_url: str | None = Field(default=None, description="SearXNG base URL; enables web_search/web_fetch")
    tavily_api_key: str | None = Field(default=None, description="Tavily API key; enables web_search/web_fetch")
    web_allow_private: bool = Field(default=False, description="TESTS ONLY: allow fetching 127.0.0.1")
    web_concurrency: int = Field(default=1, ge=1, le=64, description="requests one web replica handles at once (per-task order kept; rule T7; extraction and reranking are CPU work, so more helps only while pages are slow to arrive)")


class SandboxSettings(BaseSettings):
    """code_exec runs (rules S1-S3)."""

    model_config = CONFIG

    sandbox_timeout_s: float = Field(default=10.0, description="wall-time limit of one code_exec run (seconds, rule S3)")
    sandbox_memory_mb: int = Field(default=512, description="resident-memory limit of a run (MiB, watchdog)")
    sandbox_output_bytes: int = Field(default=64_000, description="output kept per run (bytes); the rest is cut with a note")
    sandbox_unsafe: bool = Field(default=False, description="run code without bubblewrap (logged loudly)")
    sandbox_concurrency: int = Field(default=1, ge=1, le=16, description="code_exec runs at once per sandbox replica (the isolation limit; the rest wait in the topic; rule T7)")
    sandbox_artifact_max_files: int = Field(default=10, ge=0, description="output files kept per run as artifacts (0 = none)")
    sandbox_artifact_max_bytes: int = Field(default=8 * 1024 * 1024, description="bytes of output files kept per run, all files together")
    sandbox_artifact_ttl_s: int = Field(default=86400, description="lifetime of a code_exec artifact in Redis (seconds)")


class McpSettings(BaseSettings):
    """Outside tools: MCP servers (services/mcp/, docs/mcp.md) and remote A2A agents (rules T10, T11)."""

    model_config = CONFIG

    mcp_servers: dict[str, list[dict]] = Field(default={}, description="MCP servers per tenant, JSON {tenant: [{name, command: [argv] | url, env, headers, timeout_s}]}; tenant `*` = every tenant (docs/mcp.md)")
    mcp_refresh_s: float = Field(default=5.0, gt=0, description="seconds between two looks of the mcp service at the servers' configurations (a changed one is listed again, rule X2)")
    mcp_list_ttl_s: float = Field(default=300.0, gt=0, description="seconds a server's tool list is kept before it is listed again; a failing server is tried again after mcp_refresh_s, doubled per failure in a row up to this")
    mcp_api_commands: bool = Field(default=False, description="let admins register stdio commands with POST /v1/mcp-servers (runs them on the mcp service's host); off: URLs only")
    a2a_agents: dict[str, list[dict]] = Field(default={}, description="remote A2A agents per tenant, offered as tools a2a.<name>, JSON {tenant: [{name, url, headers, read_only, description, timeout_s}]}; tenant `*` = every tenant (rule T10, docs/a2a.md)")
    a2a_allow_private: bool = Field(default=False, description="TESTS AND LOCAL DEPLOYMENTS: let remote A2A agents and push-notification URLs be on loopback and private addresses (the SSRF guard refuses them otherwise, rule T11)")
