"""Every Redis key Conduit uses, built in one place (all under the ``conduit:`` prefix).

The names below are those on one Redis node. On Redis Cluster (``CONDUIT_REDIS_CLUSTER``) a task's keys carry
its shard's hash tag (``conduit:{s7}:state:<task>``) and ``LEASES``, ``TOOL_DEADLINES``, ``PUBLIC_OUTBOX`` and
``TOOL_RUNS`` are one key per shard (``conduit:leases:{s7}``; ``leases_of``, ``all_leases``...), rule O8
(``conduit.records.slots``).

Who writes / reads each key, and its shape:

Tasks (orchestrator writes, gateway reads)
- ``state(task_id)``: string, the orchestrator's JSON checkpoint (compare-and-set on ``version``).
- ``LEASES``: sorted set, member task id, score = lease expiry (epoch s); expired = resumable.
- ``TOOL_DEADLINES``: sorted set, member task id, score = earliest tool deadline (epoch s).
- ``CONTROLS_PENDING`` / ``control(event_id)``: sorted set of recorded control events by re-send time, and
  each one's kind and JSON (``conduit.records.controls``, rule G5).
- ``QUESTIONS_PENDING``: sorted set, member task id, score = when the orchestrator's sweeper starts
  the question itself if no checkpoint exists by then (epoch s); ``question(task_id)``: string,
  the ``QuestionAsked`` JSON the gateway published (``conduit.records.questions``).
- ``task(task_id)``: string, the ``contracts.api.TaskView`` JSON record.
- ``session_turns(session_id)``: list of earlier question/answer turns.
- ``events(task_id)`` / ``events_seq(task_id)`` / ``events_terminal(task_id)``: the client event
  stream, its last sequence number and its terminal marker (``conduit.records.taskstream``).
- ``cancel(task_id)``: string flag; set when a task is cancelled (tool services stop its calls).
- ``approval(task_id, call_id)``: string, a pending ``contracts.api.ApprovalRecord``;
  ``approval_decision(task_id, call_id)``: the one decision the gateway accepted for it.
- ``fault(task_id)``: string, a crash test's once-only fault marker.
- ``PUBLIC_OUTBOX``: stream of public ``AgentEvent`` JSON (``task``, ``data`` fields) written in the
  checkpoint's save script and by the terminal append; ``PUBLIC_RELAY``: string, the replica whose
  relay publishes it to ``conduit.agent.events`` and deletes what was sent
  (``services.orchestrator.public``).

Gateway
- ``idempotency(tenant, digest)``: string, the task id an ``Idempotency-Key`` created.
- ``chat_conversation(digest)``: string, the session an OpenAI-style conversation continues
  (``digest``: SHA-256 of tenant, user and the messages so far; ``services.gateway.openai_compat.chat``).
- ``hub_wake(hub_id)``: stream the SSE hub's reader blocks on to be woken.
- ``reply(request_id)`` / ``document(tenant, id)`` / ``documents(tenant)``: search replies
  and document records (``contracts.documents``); ``document_applied(tenant, id, request_id)``: set
  of the retriever replicas (index K) that indexed that request (rule K10, ``services.retriever.replicas``).

Identity (``conduit.records.apikeys``, ``conduit.records.sessions``, ``services.gateway.identity.ratelimit``)
- ``apikey(key_id)``: hash of one API key's record (hash of the key, tenant, user, role, dates);
  ``APIKEYS``: set of every key id; ``apikey_revoked(key_id)``: marks a revoked id for good.
- ``login(digest)``: string, a one-time login token's identity (``digest``: SHA-256 of the token).
- ``session(session_id)``: hash, the session's owner, title, turn count and dates;
  ``session_tasks(session_id)``: list of its task ids; ``sessions_of_tenant(tenant)`` /
  ``sessions_of_user(owner_digest)``: sorted sets of session ids by last update.
- ``running_of_key(tenant, credential)`` / ``running_of_tenant(tenant)``: sorted sets of the
  task ids counted against the running-task limits; ``RATELIMIT_PREFIX``: the request counters.
- ``tokens_used(tenant, day)``: integer, model tokens of the tenant's tasks that ended on that UTC day
  (orchestrator adds, gateway reads; ``conduit.records.tokenbudget``, rule G6).

Memory and the semantic cache (``conduit.records.memory``; orchestrator and retriever write, gateway reads and deletes)
- ``memory(tenant, owner_digest)``: hash, item id -> ``contracts.memory.MemoryItem`` JSON of one user.
- ``session_context(session_id)``: string, a session's rolling summary and exact values (orchestrator).
- ``cache_entry(tenant, entry_id)``: string, a ``contracts.memory.CacheEntry`` JSON (TTL ``cache_ttl_s``,
  renewed on a hit); ``cache_by_document(tenant, document_id)``: set of the entry ids citing a document;
  ``cache_live(tenant)``: string marker, set for ``cache_ttl_s`` with every entry written or renewed
  (rule M8: no cache lookup for a tenant without it; an invalidation leaves it, which only costs a lookup).

Tool services and the bus
- ``tool_result(idempotency_key)``: string, a stored ``ToolResultPayload`` (idempotent tools);
  ``tool_claim(idempotency_key)``: string, the owner of the delivery running it now (expires; an owner
  is ``service:host:pid:nonce``, ``conduit.runtime.owners``).
- ``TOOL_RUNS``: sorted set, member ``owner|task_id|idempotency_key`` of each call a tool service runs now,
  score = when its run took the claim (epoch s); the orchestrator's sweeper re-sends the calls of an
  owner that is gone (rules T8, A23).
- ``STEPS``: hash, an orchestrator's owner name -> JSON list of the task ids whose model steps it runs
  (rewritten by its sweeper every pass); a gone owner's tasks have their leases lapsed at once (rule A24).
- ``members(service)``: hash, owner -> JSON ``{"parts": {topic: [partition, ...]}, "at": epoch s}``: the
  partitions each live tool service process holds (``conduit.runtime.owners``; a rescue re-send goes to one).
- ``attempts(consumer, event_id)``: counter of an event's failed deliveries.
- ``doorbell(topic)``: pub/sub channel (not a key) rung after a publish to ``topic``; it wakes the
  topic's idle consumers (``conduit.runtime.idlefetch``).
- ``artifact(artifact_id)``: hash ``{meta, data}`` of a stored tool output file.
- ``alive(service, host, pid)`` / ``alive_pattern(service)``: liveness marks (value: the process's nonce).
- ``SANDBOX_STATUSES``: hash, ``{host}:{pid}`` -> a sandbox process's isolation status
  (``conduit.records.sandboxstatus``).
- ``MODEL_HEALTH``: string, the model endpoint's last configuration error (``conduit.records.modelhealth``,
  rule A18): orchestrators write it with a TTL and delete it after a call succeeds.

MCP tools in (``conduit.records.mcp``)
- ``mcp_servers(tenant)``: hash, server name -> ``contracts.mcp.McpServerConfig`` JSON registered
  with ``POST /v1/mcp-servers`` (gateway writes, mcp service reads); ``MCP_SERVERS_PATTERN`` finds them.
- ``mcp_catalog(tenant)``: string, the tenant's ``contracts.mcp.McpCatalog`` JSON (mcp service
  writes with a TTL, orchestrator and gateway read).
"""

from __future__ import annotations

from conduit.records.slots import shard_of as _shard_of, sharded as _sharded, tag as _tag

PREFIX = "conduit"


def leases_of(task_id: str) -> str:
    """The ``LEASES`` sorted set holding ``task_id``'s lease (its shard's, on Redis Cluster)."""
    return _shard_of(LEASES, task_id)


def tool_deadlines_of(task_id: str) -> str:
    """The ``TOOL_DEADLINES`` sorted set holding ``task_id``'s tool deadline."""
    return _shard_of(TOOL_DEADLINES, task_id)


def public_outbox_of(task_id: str) -> str:
    """The ``PUBLIC_OUTBOX`` stream that ``task_id``'s public events go to."""
    return _shard_of(PUBLIC_OUTBOX, task_id)


def tool_runs_of(idempotency_key: str) -> str:
    """The ``TOOL_RUNS`` sorted set listing the run of ``idempotency_key`` (same shard as its claim)."""
    return _shard_of(TOOL_RUNS, idempotency_key)


def all_leases() -> list[str]:
    """Every ``LEASES`` shard (one key on one node)."""
    return _sharded(LEASES)


def all_tool_deadlines() -> list[str]:
    """Every ``TOOL_DEADLINES`` shard."""
    return _sharded(TOOL_DEADLINES)


def all_public_outboxes() -> list[str]:
    """Every ``PUBLIC_OUTBOX`` shard."""
    return _sharded(PUBLIC_OUTBOX)


def all_tool_runs() -> list[str]:
    """Every ``TOOL_RUNS`` shard."""
    return _sharded(TOOL_RUNS)

LEASES = f"{PREFIX}:leases"
TOOL_DEADLINES = f"{PREFIX}:tool_deadlines"
QUESTIONS_PENDING = f"{PREFIX}:questions:pending"
CONTROLS_PENDING = f"{PREFIX}:controls:pending"
SANDBOX_STATUSES = f"{PREFIX}:sandbox:statuses"
MODEL_HEALTH = f"{PREFIX}:model:health"
MCP_SERVERS_PATTERN = f"{PREFIX}:mcp:servers:*"
APIKEYS = f"{PREFIX}:apikeys"
RATELIMIT_PREFIX = f"{PREFIX}:ratelimit"
PUBLIC_OUTBOX = f"{PREFIX}:outbox:public"
PUBLIC_RELAY = f"{PREFIX}:outbox:public:relay"


def apikey(key_id: str) -> str:
    """The record of one API key."""
    return f"{PREFIX}:apikey:{key_id}"


def apikey_revoked(key_id: str) -> str:
    """Set once ``key_id`` is revoked (it is never registered again)."""
    return f"{PREFIX}:apikey:{key_id}:revoked"


def login(digest: str) -> str:
    """A one-time login token's identity (``digest``: the token's SHA-256 hex)."""
    return f"{PREFIX}:login:{digest}"


def session(session_id: str) -> str:
    """A session's owner and summary."""
    return f"{PREFIX}:session:{session_id}"


def session_tasks(session_id: str) -> str:
    """The list of a session's task ids."""
    return f"{PREFIX}:session:{session_id}:tasks"


def session_workers(session_id: str) -> str:
    """The list of the worker task ids a session's team-mode tasks started (rule D2; deleted with it)."""
    return f"{PREFIX}:session:{session_id}:workers"


def sessions_of_tenant(tenant_id: str) -> str:
    """The sorted set of a tenant's sessions."""
    return f"{PREFIX}:sessions:tenant:{tenant_id}"


def sessions_of_user(owner_digest: str) -> str:
    """The sorted set of one user's sessions (``owner_digest``: SHA-256 of ``tenant\x00user``)."""
    return f"{PREFIX}:sessions:user:{owner_digest}"


def running_of_key(tenant_id: str, credential_id: str) -> str:
    """Task ids counted against one credential's running-task limit."""
    return f"{PREFIX}:running:key:{tenant_id}/{credential_id}"


def running_of_tenant(tenant_id: str) -> str:
    """Task ids counted against a tenant's running-task limit."""
    return f"{PREFIX}:running:tenant:{tenant_id}"


def tokens_used(tenant_id: str, day: str) -> str:
    """Integer: model tokens a tenant's finished tasks used on UTC ``day`` (``YYYY-MM-DD``; rule G6)."""
    return f"{PREFIX}:tokens:tenant:{tenant_id}:{day}"


def state(task_id: str) -> str:
    """The orchestrator's checkpoint of ``task_id``."""
    return f"{PREFIX}{_tag(task_id)}:state:{task_id}"


def control(event_id: str) -> str:
    """A recorded control event (approval decision or cancel) until an orchestrator handled it (rule G5)."""
    return f"{PREFIX}:control:{event_id}"


def question(task_id: str) -> str:
    """The ``QuestionAsked`` JSON of ``task_id`` until an orchestrator started it."""
    return f"{PREFIX}{_tag(task_id)}:question:{task_id}"


def task(task_id: str) -> str:
    """The ``TaskView`` record of ``task_id``."""
    return f"{PREFIX}{_tag(task_id)}:task:{task_id}"


def session_turns(session_id: str) -> str:
    """The list of a session's earlier turns."""
    return f"{PREFIX}:session:{session_id}:turns"


def events(task_id: str) -> str:
    """The client event stream of ``task_id``."""
    return f"{PREFIX}{_tag(task_id)}:events:{task_id}"


def events_seq(task_id: str) -> str:
    """The last sequence number written to ``events(task_id)``."""
    return f"{PREFIX}{_tag(task_id)}:events:{task_id}:seq"


def events_terminal(task_id: str) -> str:
    """Set once ``events(task_id)`` holds its terminal event."""
    return f"{PREFIX}{_tag(task_id)}:events:{task_id}:terminal"


def cancel(task_id: str) -> str:
    """The cancel flag of ``task_id``."""
    return f"{PREFIX}{_tag(task_id)}:cancel:{task_id}"


def approval(task_id: str, call_id: str) -> str:
    """A pending approval of one tool call."""
    return f"{PREFIX}{_tag(task_id)}:approval:{task_id}:{call_id}"


def approval_decision(task_id: str, call_id: str) -> str:
    """The decision the gateway accepted for one tool call (first one wins)."""
    return f"{PREFIX}{_tag(task_id)}:approval:{task_id}:{call_id}:decision"


def fault(task_id: str) -> str:
    """A crash test's once-only fault marker for ``task_id``."""
    return f"{PREFIX}{_tag(task_id)}:fault:{task_id}"


def idempotency(tenant_id: str, digest: str) -> str:
    """The task created under one ``Idempotency-Key`` (``digest``: its SHA-256 hex) of a tenant."""
    return f"{PREFIX}:idempotency:{tenant_id}:{digest}"


def chat_conversation(digest: str) -> str:
    """The session id of the conversation whose messages so far hash to ``digest``."""
    return f"{PREFIX}:chat:{digest}"


def hub_wake(hub_id: str) -> str:
    """The wake-up stream of one gateway's SSE hub."""
    return f"{PREFIX}:gateway:hub:{hub_id}:wake"


def reply(request_id: str) -> str:
    """The list where the retriever puts the ``SearchReply`` of ``request_id``."""
    return f"{PREFIX}:reply:{request_id}"


def document(tenant_id: str, document_id: str) -> str:
    """The ``DocumentView`` JSON of one document."""
    return f"{PREFIX}:document:{tenant_id}:{document_id}"


def documents(tenant_id: str) -> str:
    """The set of a tenant's document ids."""
    return f"{PREFIX}:documents:{tenant_id}"


def document_applied(tenant_id: str, document_id: str, request_id: str) -> str:
    """The set of retriever replica indexes (K) that indexed ingest request ``request_id`` (rule K10)."""
    return f"{PREFIX}:docapplied:{tenant_id}:{document_id}:{request_id}"


def tool_claim(idempotency_key: str) -> str:
    """The claim of the one delivery running the tool call ``idempotency_key`` (value: its owner)."""
    return f"{PREFIX}{_tag(idempotency_key)}:toolclaim:{idempotency_key}"


STEPS = f"{PREFIX}:steps"
"""Hash of the model steps each orchestrator process runs now, owner -> JSON task ids (rule A24)."""
TOOL_RUNS = f"{PREFIX}:toolruns"
"""Sorted set of the tool calls running now, ``owner|task_id|idempotency_key`` by claim time (rule T8)."""


def members(service: str) -> str:
    """Hash of the live processes of tool service ``service``: owner -> the partitions it holds."""
    return f"{PREFIX}:members:{service}"


def tool_result(idempotency_key: str) -> str:
    """The stored result of one tool call."""
    return f"{PREFIX}:toolresult:{idempotency_key}"


def web_fetched(idempotency_key: str, url_digest: str) -> str:
    """A page the web tool call ``idempotency_key`` fetched (``services.web.journal``)."""
    return f"{PREFIX}:webfetched:{idempotency_key}:{url_digest}"


def attempts(consumer: str, event_id: str) -> str:
    """The failed-delivery count of one event at one consumer."""
    return f"{PREFIX}:attempts:{consumer}:{event_id}"


def doorbell(topic: str) -> str:
    """The pub/sub channel whose message wakes the idle consumers of Kafka topic ``topic``."""
    return f"{PREFIX}:doorbell:{topic}"


def artifact(artifact_id: str) -> str:
    """A stored artifact (hash of ``meta`` and ``data``)."""
    return f"{PREFIX}:artifact:{artifact_id}"


def alive(service: str, host: str, pid: int) -> str:
    """The liveness mark of ``service`` in process ``pid`` on ``host``."""
    return f"{PREFIX}:alive:{service}:{host}:{pid}"


def alive_pattern(service: str = "*", host: str = "*") -> str:
    """SCAN pattern of the liveness marks of ``service`` on ``host`` (default: every service, every host)."""
    return f"{PREFIX}:alive:{service}:{host}:*"


def mcp_servers(tenant_id: str) -> str:
    """The MCP servers a tenant's admins registered (hash: name -> config JSON)."""
    return f"{PREFIX}:mcp:servers:{tenant_id}"


def mcp_catalog(tenant_id: str) -> str:
    """The tenant's MCP tools and server statuses (``McpCatalog`` JSON)."""
    return f"{PREFIX}:mcp:catalog:{tenant_id}"


def a2a_push(task_id: str) -> str:
    """A task's A2A push-notification configs (hash: config id -> ``TaskPushNotificationConfig`` JSON; rule T12)."""
    return f"{PREFIX}:a2a:push:{task_id}"


def a2a_pushing(task_id: str) -> str:
    """Held by the gateway process that sends a task's push notifications (its owner name; rule T12)."""
    return f"{PREFIX}:a2a:pushing:{task_id}"


def memory(tenant_id: str, owner_digest: str) -> str:
    """The hash of one user's memory items (``owner_digest``: SHA-256 of ``tenant\x00user``)."""
    return f"{PREFIX}:memory:{tenant_id}:{owner_digest}"


def session_context(session_id: str) -> str:
    """A session's rolling summary and exact values (``contracts.api.SessionContext`` JSON)."""
    return f"{PREFIX}:session:{session_id}:context"


def cache_entry(tenant_id: str, entry_id: str) -> str:
    """One semantic-cache entry of a tenant."""
    return f"{PREFIX}:cache:{tenant_id}:{entry_id}"


def cache_live(tenant_id: str) -> str:
    """Set while the tenant may have a live cache entry (rule M8)."""
    return f"{PREFIX}:cachelive:{tenant_id}"


def cache_by_document(tenant_id: str, document_id: str) -> str:
    """The set of a tenant's cache entry ids whose answer cites ``document_id``."""
    return f"{PREFIX}:cache:{tenant_id}:bydoc:{document_id}"


def agui_run(tenant_id: str, run_id: str) -> str:
    """The Conduit task an AG-UI run of a tenant shows (``POST /v1/agui``), for the task's life: ``"<task_id> <seq>"``,
    ``seq`` the log event the run starts after (0; a resuming run: its approval's interrupt)."""
    return f"{PREFIX}:agui:run:{tenant_id}:{run_id}"
