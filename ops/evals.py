"""``conduit eval``: quality, fault-injection and security gates (README "Evals and benchmarks").

Suites (data in ``evals/``):
- ``guardrails`` and ``routing``: offline, no stack (``ops.policy_evals``).
- ``golden`` (``golden.jsonl``: question, expected ``law`` and ``article``): each
  question goes through the gateway; the gate passes when the terminal
  ``task.completed`` cites the expected law and article.
- ``fault``: (a) the model endpoint is down (the eval's stack points
  ``OPENAI_BASE_URL`` at a closed port) → every task still completes, in
  ``retrieval_only`` mode with citations; (b) a malformed message on
  ``conduit.questions`` → a ``DeadLetter`` from the orchestrator on ``conduit.dead-letter``.
- ``security``: every prompt-injection string (``security.jsonl``) is rejected by the
  gateway before any model call (``422 input_rejected`` with its category); a question one
  character over ``max_question_chars`` gets ``413 question_too_large``; every URL of
  ``ssrf.txt`` is refused by the web service's guard (``services.web.safefetch``).

``--fast`` keeps the rows marked ``"fast": true``. Without ``--url`` the eval starts
its own private stack (tansu, redis-server, retriever, orchestrator, gateway on free
ports, the golden laws ingested into a temporary data dir, a dead model endpoint);
with ``--url`` it runs against that gateway and the model-down gate is skipped
(the stack's model is not under the eval's control). Exit code 1 when a gate fails.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from ops.gates import EVALS_DIR, Gate


def _rows(name: str, fast: bool) -> list[dict]:
    rows = [json.loads(line) for line in (EVALS_DIR / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r.get("fast")] if fast else rows


def _ask(base: str, key: str | None, question: str, timeout_s: float = 90.0) -> tuple[int, dict | None, str]:
    """POST a question and follow its stream: ``(status, terminal event data or None, terminal type)``."""
    from ops.client import bearer, stream_task

    r = httpx.post(f"{base}/v1/tasks", json={"question": question}, headers=bearer(key), timeout=30)
    if r.status_code != 202:
        return r.status_code, None, ""
    last = None
    for ev in stream_task(base, r.json()["task_id"], read_timeout_s=timeout_s, api_key=key):
        last = ev
    if last is None or last.event not in ("task.completed", "task.failed", "task.cancelled"):
        return r.status_code, None, ""
    return r.status_code, last.data, last.event


def golden(base: str, fast: bool, model_down: bool, key: str | None = None) -> list[Gate]:
    """The golden questions; with ``model_down`` also checks the fallback mode (fault suite)."""
    gates = []
    for row in _rows("golden.jsonl", fast):
        status, done, kind = _ask(base, key, row["question"])
        cites = (done or {}).get("citations", [])
        hit = any(row["law"] in c.get("title", "") and c.get("locator") == row["article"] for c in cites)
        got = ", ".join(f"{c.get('title')}{c.get('locator') or ''}" for c in cites[:6]) or f"{status} {kind} {done}"
        gates.append(Gate("golden", row["id"], kind == "task.completed" and hit,
                          f"expected 《{row['law']}》{row['article']}; cited: {got}"[:400]))
        if model_down:
            mode = (done or {}).get("mode")
            gates.append(Gate("fault", f"model-down:{row['id']}", kind == "task.completed" and mode == "retrieval_only"
                              and bool(cites), f"mode={mode} fallback={(done or {}).get('fallback_reason')}"[:300]))
    return gates


async def _dead_letter_gate(bootstrap: str) -> Gate:
    """Publish a malformed question; expect the orchestrator's DeadLetter for it within 60 s."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from contracts import topics

    marker = f"eval-malformed-{uuid.uuid4().hex}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(topics.DEAD_LETTER, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                fetch_max_wait_ms=10)
    await producer.start()
    await consumer.start()
    try:
        await producer.send_and_wait(topics.QUESTIONS, json.dumps({"type": "question.asked", "junk": marker}).encode(),
                                     key=b"eval")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for rec in records:
                    body = json.loads(rec.value)
                    if marker in body.get("payload", {}).get("raw", ""):
                        who = body["payload"].get("consumer")
                        return Gate("fault", "malformed-event-dead-lettered", who == "orchestrator", f"consumer={who}")
        return Gate("fault", "malformed-event-dead-lettered", False, "no DeadLetter within 60 s")
    finally:
        await consumer.stop()
        await producer.stop()


def security(base: str, fast: bool, max_chars: int, key: str | None = None) -> list[Gate]:
    """Injection corpus, oversized input and SSRF URL gates."""
    gates = []
    from ops.client import bearer

    for row in _rows("security.jsonl", fast):
        r = httpx.post(f"{base}/v1/tasks", json={"question": row["text"]}, headers=bearer(key), timeout=30)
        error = (r.json().get("error") or {}) if r.headers.get("content-type", "").startswith("application/json") else {}
        category = (error.get("details") or {}).get("category")
        gates.append(Gate("security", f"injection:{row['id']}", r.status_code == 422 and error.get("code") == "input_rejected",
                          f"status={r.status_code} code={error.get('code')} category={category}"))
    r = httpx.post(f"{base}/v1/tasks", json={"question": "长" * (max_chars + 1)}, headers=bearer(key), timeout=30)
    code = (r.json().get("error") or {}).get("code") if r.headers.get("content-type", "").startswith("application/json") else None
    gates.append(Gate("security", "oversized-413", r.status_code == 413 and code == "question_too_large",
                      f"status={r.status_code} code={code}"))
    gates.extend(ssrf_gates())
    return gates


def ssrf_gates() -> list[Gate]:
    """Every URL of ``evals/ssrf.txt`` is refused: by form (``check_url``) or by address (``AddressPolicy``)."""
    from services.web.safefetch import AddressPolicy, check_url
    from conduit.runtime.toolservice import ToolFailure

    policy = AddressPolicy()
    gates = []
    for url in (EVALS_DIR / "ssrf.txt").read_text().split():
        try:
            host = check_url(url).strip("[]")
            reason = policy.block_reason(ipaddress.ip_address(host))
        except ToolFailure as exc:
            reason = exc.error.error_code
        except ValueError:
            reason = None  # a name: resolved and checked at connect time, not decidable offline
        gates.append(Gate("security", f"ssrf:{url}", reason is not None, reason or "allowed"))
    return gates


SUITES = ("guardrails", "routing", "golden", "fault", "security")
"""Every suite, the offline ones first."""


def run(url: str | None, fast: bool, suites: tuple[str, ...] = SUITES,
        infra_settings: object | None = None) -> list[Gate]:
    """Run ``suites`` against ``url`` or a private stack; return every gate.

    ``infra_settings`` (a ``Settings`` with broker and Redis addresses) makes the
    private stack reuse that broker and Redis instead of starting its own (tests).
    """
    from ops import policy_evals
    from conduit.runtime.settings import Settings, get_settings

    offline: list[Gate] = []
    if "guardrails" in suites:
        offline += policy_evals.guardrail_gates()
    if "routing" in suites:
        offline += policy_evals.routing_gates()
    suites = tuple(s for s in suites if s not in ("guardrails", "routing"))
    if not suites:
        return offline
    if url:
        s = get_settings()
        gates: list[Gate] = []
        if "golden" in suites:
            gates += golden(url, fast, model_down=False)
        if "fault" in suites:
            gates.append(asyncio.run(_dead_letter_gate(s.bus.bootstrap_servers())))
        if "security" in suites:
            gates += security(url, fast, s.gateway.max_question_chars)
        return offline + gates
    from ops import infra
    from ops.stack import Stack
    from services.retriever.ingest import ingest_law_db

    laws = sorted({r["law"] for r in _rows("golden.jsonl", fast)})
    data_dir = Path(tempfile.mkdtemp(prefix="conduit-eval-"))
    base = infra_settings if isinstance(infra_settings, Settings) else Settings(
        embedded_kafka_port=infra.free_port(), embedded_redis_port=infra.free_port())
    settings = base.changed(data_dir=data_dir, gateway_port=infra.free_port())
    ingest_law_db(settings, law_names=laws, progress=False)
    dead_model = f"http://127.0.0.1:{infra.free_port()}/v1"
    stack = Stack(settings, services=("retriever", "orchestrator", "gateway"),
                  extra_env={"OPENAI_BASE_URL": dead_model, "OPENAI_API_KEY": "eval", "CONDUIT_MODEL_MAX_RETRIES": "0",
                             "CONDUIT_MODEL_CONNECT_TIMEOUT_S": "2", "CONDUIT_LOG_LEVEL": "WARNING"})
    stack.start()
    try:
        base = stack.gateway_url
        gates = []
        if "golden" in suites or "fault" in suites:
            gates += golden(base, fast, model_down="fault" in suites, key=stack.admin_key)
        if "fault" in suites:
            gates.append(asyncio.run(_dead_letter_gate(settings.bus.bootstrap_servers())))
        if "security" in suites:
            gates += security(base, fast, settings.gateway.max_question_chars, key=stack.admin_key)
        return offline + gates
    finally:
        stack.stop()
