"""The pre-router's classifier call (rule R1, docs/agent-rules.md): one small OpenAI-compatible
model scores a question for the tenant's domain, chit-chat and calculation.

``decide(router, llm, question, domain)`` (``settings.router``, ``settings.llm``) applies the rules first (``agent.routing.by_rules``), then,
when ``router_model`` is set, asks the model for ``{"domain": x, "chitchat": y, "calculation": z}``
(0..1 each) within ``router_timeout_s`` (3 s). Fail-open: a timeout, quota, network or format
error means "no decision" (``source="none"``, the error kept) and the normal agent runs.
"""

from __future__ import annotations

import json
import re
import time

import httpx

from conduit.runtime.settings import LlmSettings, RouterSettings
from services.orchestrator.agent.routing import Domain, RouteDecision, by_rules, from_scores

_INSTRUCTION = ("Score the user message. Reply with JSON only: {{\"domain\": d, \"chitchat\": c, \"calculation\": k}}, "
                "each a number from 0 to 1. domain: how much it is about {name} ({description}). chitchat: greeting, "
                "thanks, small talk or questions about the assistant. calculation: it needs arithmetic.")


def _scores(text: str) -> dict[str, float]:
    match = re.search(r"\{.*\}", text, re.DOTALL)
    raw = json.loads(match.group(0) if match else text)
    scores = {k: float(raw[k]) for k in ("domain", "chitchat", "calculation") if k in raw}
    if "domain" not in scores or not all(0.0 <= v <= 1.0 for v in scores.values()):
        raise ValueError(f"bad scores: {raw}")
    return scores


async def classify(router: RouterSettings, llm: LlmSettings, question: str, domain: Domain,
                   client: httpx.AsyncClient | None = None) -> RouteDecision:
    """The router model's decision for ``question`` (never raises: fail-open)."""
    base = (router.router_base_url or llm.openai_base_url or "").rstrip("/")
    key = router.router_api_key or llm.openai_api_key or "not-needed"
    body = {"model": router.router_model, "temperature": 0, "max_tokens": 60,
            "messages": [{"role": "system", "content": _INSTRUCTION.format(name=domain.name_en, description=domain.description)},
                         {"role": "user", "content": question}]}
    t0 = time.perf_counter()
    own = client is None
    http = client or httpx.AsyncClient(timeout=router.router_timeout_s)
    try:
        r = await http.post(f"{base}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                            timeout=router.router_timeout_s)
        r.raise_for_status()
        scores = _scores(r.json()["choices"][0]["message"]["content"] or "")
        decision = from_scores(scores, router.router_out_of_scope_below, router.router_chitchat_min,
                               router.router_chitchat_domain_below, router.router_calc_min)
    except Exception as exc:  # noqa: BLE001 - fail-open: the router may never become a point of failure
        decision = RouteDecision(source="none", error=f"{type(exc).__name__}: {exc}"[:200])
    finally:
        if own:
            await http.aclose()
    decision.latency_ms = round((time.perf_counter() - t0) * 1000, 2)
    return decision


async def decide(router: RouterSettings, llm: LlmSettings, question: str, domain: Domain) -> RouteDecision | None:
    """Rules first, then the router model when configured; None: neither decided (the agent runs)."""
    ruled = by_rules(question)
    if ruled is not None:
        return ruled
    if not router.router_model or not (router.router_base_url or llm.openai_base_url):
        return None
    return await classify(router, llm, question, domain)
