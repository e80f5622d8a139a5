"""Settings per concern: each group reads the same environment variables the one flat ``Settings`` read.

Every ``CONDUIT_<FIELD>`` name and the plain aliases (``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``, ``QDRANT_URL``,
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``) keep working; field keywords go to their group; unknown ones are refused.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from conduit.runtime.settings import FIELD_GROUP, GROUPS, BusSettings, Settings, StoreSettings

ENV = {  # a few variables of each group -> (group, field, the value read)
    "CONDUIT_DATA_DIR": ("stack", "data_dir", Path("/srv/conduit")),
    "CONDUIT_SUPERVISOR_MAX_RESTARTS": ("stack", "supervisor_max_restarts", 9),
    "CONDUIT_EMBEDDED_KAFKA_PORT": ("bus", "embedded_kafka_port", 29092),
    "CONDUIT_KAFKA_PARTITIONS": ("bus", "kafka_partitions", 3),
    "CONDUIT_EMBEDDED_REDIS_PORT": ("store", "embedded_redis_port", 26379),
    "CONDUIT_REDIS_CLUSTER": ("store", "redis_cluster", True),
    "CONDUIT_GATEWAY_PORT": ("gateway", "gateway_port", 9000),
    "CONDUIT_SSE_HEARTBEAT_S": ("gateway", "sse_heartbeat_s", 5.0),
    "CONDUIT_AUTH": ("identity", "auth", "jwt"),
    "CONDUIT_AUTH_JWT_AUDIENCE": ("identity", "auth_jwt_audience", "api"),
    "CONDUIT_MAX_ROUNDS": ("limits", "max_rounds", 4),
    "CONDUIT_RATE_LIMIT_KEY_PER_MINUTE": ("limits", "rate_limit_key_per_minute", 60),
    "CONDUIT_TENANTS": ("tenancy", "tenants", {"acme": {"model": "m"}}),
    "CONDUIT_TIME_ZONE": ("tenancy", "time_zone", "Europe/Berlin"),
    "CONDUIT_MODEL": ("llm", "model", "scripted"),
    "CONDUIT_MODEL_READ_TIMEOUT_S": ("llm", "model_read_timeout_s", 7.5),
    "CONDUIT_ROUTER_MODEL": ("router", "router_model", "tiny"),
    "CONDUIT_PLAN_MODE": ("agent", "plan_mode", "auto"),
    "CONDUIT_LEASE_TTL_S": ("agent", "lease_ttl_s", 3.0),
    "CONDUIT_TOOL_TIMEOUT_S": ("tools", "tool_timeout_s", 12.0),
    "CONDUIT_APPROVAL_POLICIES": ("tools", "approval_policies", {"code_exec": "never"}),
    "CONDUIT_MEMORY_RECALL_K": ("memory", "memory_recall_k", 2),
    "CONDUIT_CACHE_ENABLED": ("memory", "cache_enabled", False),
    "CONDUIT_RETRIEVAL_TOP_K": ("retrieval", "retrieval_top_k", 3),
    "CONDUIT_RERANK_URL": ("retrieval", "rerank_url", "http://tei:8080/rerank"),
    "CONDUIT_SEARXNG_URL": ("web", "searxng_url", "http://sx:8080"),
    "CONDUIT_SANDBOX_TIMEOUT_S": ("sandbox", "sandbox_timeout_s", 4.0),
    "CONDUIT_MCP_REFRESH_S": ("mcp", "mcp_refresh_s", 1.5),
    "CONDUIT_LOG_JSON": ("observability", "log_json", False),
    "CONDUIT_METRICS_PORT": ("observability", "metrics_port", 9464),
}
RAW = {"CONDUIT_TENANTS": '{"acme": {"model": "m"}}', "CONDUIT_APPROVAL_POLICIES": '{"code_exec": "never"}'}
PLAIN = {  # the plain aliases -> (group, field)
    "KAFKA_BOOTSTRAP_SERVERS": ("bus", "kafka_bootstrap_servers"),
    "REDIS_URL": ("store", "redis_url"),
    "QDRANT_URL": ("retrieval", "qdrant_url"),
    "OPENAI_BASE_URL": ("llm", "openai_base_url"),
    "OPENAI_API_KEY": ("llm", "openai_api_key"),
}


def test_every_group_reads_its_conduit_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {group for group, _, _ in ENV.values()} == set(GROUPS), "a group without an environment check"
    for name, (_, _, value) in ENV.items():
        monkeypatch.setenv(name, RAW.get(name, str(value).lower() if isinstance(value, bool) else str(value)))
    settings = Settings()
    for name, (group, field, value) in ENV.items():
        assert getattr(getattr(settings, group), field) == value, name
        assert FIELD_GROUP[field] == group


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_the_plain_aliases_and_their_conduit_names_are_read(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    group, field = PLAIN[name]
    monkeypatch.setenv(name, "plain://x")
    assert getattr(getattr(Settings(), group), field) == "plain://x"
    monkeypatch.setenv(f"CONDUIT_{field.upper()}", "prefixed://x")  # the CONDUIT_ name wins, as before
    assert getattr(getattr(Settings(), group), field) == "prefixed://x"


def test_every_variable_name_is_the_field_name_with_the_prefix() -> None:
    assert len(FIELD_GROUP) == sum(len(cls.model_fields) for cls in GROUPS.values()), "a field name in two groups"
    for cls in GROUPS.values():
        assert cls.model_config["env_prefix"] == "CONDUIT_"


def test_field_keywords_go_to_their_group_and_the_environment_fills_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUIT_KAFKA_PARTITIONS", "2")
    settings = Settings(kafka_bootstrap_servers="k:9092", redis_url="redis://r:6379/0", gateway_port=1)
    assert (settings.bus.bootstrap_servers(), settings.bus.kafka_partitions) == ("k:9092", 2)
    assert (settings.store.url(), settings.gateway.gateway_port) == ("redis://r:6379/0", 1)
    whole = Settings(bus=BusSettings(kafka_partitions=5), store={"embedded_redis_port": 7}, kafka_idle_probe_s=9.0)
    assert (whole.bus.kafka_partitions, whole.bus.kafka_idle_probe_s) == (5, 9.0)
    assert whole.store.url() == "redis://127.0.0.1:7/0" and isinstance(whole.store, StoreSettings)
    with pytest.raises(ValidationError, match="no_such_setting"):
        Settings(no_such_setting=1)
    with pytest.raises(ValidationError, match="unknown time zone"):
        Settings(time_zone="Mars/Olympus")


def test_changed_copies_with_fields_changed_and_checked() -> None:
    base = Settings(redis_url="redis://r:6379/0", sandbox_timeout_s=10.0)
    copy = base.changed(sandbox_timeout_s=3.0, retrieval_top_k=2)
    assert (copy.sandbox.sandbox_timeout_s, copy.retrieval.retrieval_top_k, copy.store.redis_url) == (3.0, 2, "redis://r:6379/0")
    assert base.sandbox.sandbox_timeout_s == 10.0 and base.changed({"web_concurrency": 2}).web.web_concurrency == 2
    with pytest.raises(ValidationError):
        base.changed(web_concurrency=0)  # ge=1, checked like the constructor


ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("bench", "conduit", "contracts", "ops", "services", "testkit", "tests")
FLAT = re.compile(r"(?<![\w.])((?:[\w\]\)]+\.)*settings|get_settings\(\)|Settings\(\))\.("
                  + "|".join(sorted([*FIELD_GROUP, "bootstrap_servers", "redis", "model_configured", "model_rewrite_on",
                                     "model_rerank_on"], key=len, reverse=True)) + r")\b")
"""``settings.<field>`` on the root, as the one flat ``Settings`` was read (``settings.<group>.<field>`` now)."""


def test_no_reader_uses_a_flat_field_of_the_root() -> None:
    """A branch written against the flat ``Settings`` (``state.settings.task_events_ttl_s``) fails here, not at run
    time with an ``AttributeError``: read ``settings.gateway.task_events_ttl_s`` (FIELD_GROUP names the group)."""
    found = []
    for top in SOURCES:
        for path in sorted(p for p in (ROOT / top).rglob("*.py") if p != Path(__file__).resolve()):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                found += [f"{path.relative_to(ROOT)}:{number}: {m.group(0)} -> {m.group(1)}."
                          f"{FIELD_GROUP.get(m.group(2), '<group>')}.{m.group(2)}" for m in FLAT.finditer(line)]
    assert not found, "flat settings reads:\n" + "\n".join(found)
