"""The golden set's runner (rules E11, E13; docs/evals.md "The golden set"): every case of ``evals/golden.yaml``
asked ``k`` times through a gateway, each run checked against the case's ``expect``.

A run's ``Observed``: the terminal event kind (or ``rejected`` with the gateway's status, error code and guardrail
category when ``POST /v1/tasks`` refused it), the task's mode, the tool calls it ran (``GET /v1/tasks/{id}``
``steps``, in order) and its citations. Rule E11: a case passes when all its runs pass; ``pass^k`` is reported per
case and also asks that the k runs ended the same way (same outcome, mode, tools and cited evidence ids): a case
that passes twice and fails once, or cites other evidence each time, is flaky, and flaky is failing. The behaviour
only means something against a stack whose model is the golden set's scripted model (``testkit/golden_model.py``,
rule E11's only stand-in); ``conduit evals run`` starts one.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from ops.gates import EVALS_DIR

GOLDEN = EVALS_DIR / "golden.yaml"
"""The golden set: ``documents`` to upload first and ``cases``."""
ROOT = EVALS_DIR.parent


def load(path: Path = GOLDEN) -> dict[str, Any]:
    """The golden file as ``{documents: [...], cases: [...]}`` (missing keys: empty lists)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {"documents": data.get("documents") or [], "cases": data.get("cases") or []}


def question_of(case: dict[str, Any]) -> str:
    """The text asked: ``question`` repeated ``repeat`` times (default once)."""
    return str(case["question"]) * int(case.get("repeat", 1))


def laws_of(cases: list[dict[str, Any]]) -> list[str]:
    """Names of the current laws the cases cite with a locator (``expect.cite.title``, ``《》`` stripped, the
    ``中华人民共和国`` prefix added when missing): what a golden stack ingests. A title that names no current law of
    ``laws.db`` (an uploaded document's) is left out."""
    from services.retriever import lawdb

    titles = {str(c["expect"]["cite"]["title"]).strip("《》") for c in cases
              if (c.get("expect") or {}).get("cite", {}).get("locator") and c["expect"]["cite"].get("title")}
    wanted = {t if t.startswith("中华人民共和国") else f"中华人民共和国{t}" for t in titles}
    return sorted(wanted & {law.law_name for law in lawdb.list_laws()})


@dataclass
class Observed:
    """What one run of a case did (see the module doc); ``task_id`` is None when it was rejected."""

    outcome: str
    task_id: str | None = None
    status: int = 202
    code: str | None = None
    category: str | None = None
    mode: str | None = None
    tools: list[str] = field(default_factory=list)
    citations: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def signature(self) -> tuple:
        """What must be equal across the k runs of one case (rule E11)."""
        return (self.outcome, self.status, self.code, self.mode, tuple(self.tools),
                tuple(sorted(c.get("chunk_id", "") for c in self.citations)))


def ask(base: str, key: str | None, case: dict[str, Any], timeout_s: float = 120.0) -> Observed:
    """Ask ``case`` once and follow it to its end (``ops.client.stream_task``), then read its record."""
    from ops.client import bearer, stream_task

    t0 = time.monotonic()
    body = {"question": question_of(case)} | ({"allowed_tools": case["allowed_tools"]} if "allowed_tools" in case else {})
    r = httpx.post(f"{base}/v1/tasks", json=body, headers=bearer(key), timeout=30)
    if r.status_code != 202:
        error = (r.json().get("error") or {}) if "json" in r.headers.get("content-type", "") else {}
        return Observed("rejected", status=r.status_code, code=error.get("code"),
                        category=(error.get("details") or {}).get("category") if isinstance(error.get("details"), dict)
                        else None, seconds=time.monotonic() - t0)
    task_id = r.json()["task_id"]
    last = None
    for ev in stream_task(base, task_id, read_timeout_s=timeout_s, api_key=key):
        last = ev
    view = httpx.get(f"{base}/v1/tasks/{task_id}", headers=bearer(key), timeout=30).json()
    return Observed(last.event if last else "none", task_id, mode=view.get("mode"),
                    tools=[s["tool"] for s in view.get("steps") or [] if s.get("kind") == "tool" and s.get("tool")],
                    citations=view.get("citations") or [], seconds=time.monotonic() - t0)


def _cites(citations: list[dict[str, Any]], cite: dict[str, Any]) -> bool:
    title, locator = cite.get("title", ""), cite.get("locator")
    return any(title in str(c.get("title") or "") and (locator is None or c.get("locator") == locator)
               for c in citations)


def check(case: dict[str, Any], got: Observed) -> list[str]:
    """Why ``got`` does not meet ``case["expect"]`` (empty: it does)."""
    want = case.get("expect") or {}
    bad = []
    for name in ("outcome", "status", "code", "category", "mode"):
        if name in want and getattr(got, name) != want[name]:
            bad.append(f"{name} {getattr(got, name)!r} != {want[name]!r}")
    if "tools" in want and got.tools != list(want["tools"]):
        bad.append(f"tools {got.tools} != {want['tools']}")
    if "citations" in want and bool(got.citations) != bool(want["citations"]):
        bad.append(f"citations {len(got.citations)} (expected {'some' if want['citations'] else 'none'})")
    if want.get("cite") and not _cites(got.citations, want["cite"]):
        shown = ", ".join(f"{c.get('title')}{c.get('locator') or ''}" for c in got.citations[:4]) or "none"
        bad.append(f"no citation of {want['cite']} (cited: {shown})")
    if want.get("evidence") and not set(want["evidence"]) & {c.get("chunk_id") for c in got.citations}:
        bad.append(f"none of the evidence {want['evidence'][:3]} cited")
    return bad


@dataclass
class CaseResult:
    """The k runs of one case: ``runs`` (observed, failures) and the verdicts."""

    case: dict[str, Any]
    runs: list[tuple[Observed, list[str]]]

    @property
    def passes(self) -> int:
        """How many of the k runs met ``expect``."""
        return sum(1 for _, bad in self.runs if not bad)

    @property
    def same(self) -> bool:
        """True when every run ended the same way (``Observed.signature``)."""
        return len({o.signature() for o, _ in self.runs}) <= 1

    @property
    def passed(self) -> bool:
        """Rule E11: pass^k: all k runs passed and ended the same way."""
        return self.passes == len(self.runs) and self.same

    def detail(self) -> str:
        """The first failure, or the first run's outcome."""
        for o, bad in self.runs:
            if bad:
                return "; ".join(bad)
        if not self.same:
            return "runs ended differently: " + " | ".join(str(o.signature()[:5]) for o, _ in self.runs)
        o = self.runs[0][0] if self.runs else None
        return "" if o is None else f"{o.outcome} {o.mode or o.code or ''} tools={o.tools} cites={len(o.citations)}"


def upload(base: str, key: str | None, documents: list[dict[str, Any]], timeout_s: float = 120.0) -> None:
    """``POST /v1/documents`` each golden document (``{document_id, title, path}``, path from the repository
    root) and wait until each is ``ingested``. Raises ``RuntimeError`` when one is not within ``timeout_s``."""
    from ops.client import bearer

    for doc in documents:
        text = (ROOT / doc["path"]).read_text(encoding="utf-8")
        body = {"document_id": doc["document_id"], "title": doc["title"], "text": text}
        httpx.post(f"{base}/v1/documents", json=body, headers=bearer(key), timeout=30).raise_for_status()
    deadline = time.monotonic() + timeout_s
    for doc in documents:
        while httpx.get(f"{base}/v1/documents/{doc['document_id']}", headers=bearer(key),
                        timeout=30).json().get("status") != "ingested":
            if time.monotonic() > deadline:
                raise RuntimeError(f"document {doc['document_id']} not ingested within {timeout_s:.0f} s")
            time.sleep(0.5)


def run(base: str, key: str | None, cases: list[dict[str, Any]], k: int = 3, workers: int = 4) -> list[CaseResult]:
    """Ask every case ``k`` times (``workers`` tasks at once; the scripted model chooses turns from each
    request alone, so runs of one case may overlap); returns one ``CaseResult`` per case, in file order."""
    jobs = [(i, case) for i, case in enumerate(cases) for _ in range(k)]

    def one(job: tuple[int, dict[str, Any]]) -> tuple[int, Observed]:
        return job[0], ask(base, key, job[1])

    runs: dict[int, list[tuple[Observed, list[str]]]] = {i: [] for i in range(len(cases))}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i, observed in pool.map(one, jobs):
            runs[i].append((observed, check(cases[i], observed)))
    return [CaseResult(case, runs[i]) for i, case in enumerate(cases)]


SERVICES = ("retriever", "orchestrator", "gateway", "sandbox", "web")
"""What the golden set runs on (``conduit evals run``'s private stack, ``tests/stack/test_golden.py``)."""


def stack_env(model_url: str, search_url: str) -> dict[str, str]:
    """The ``env`` of a golden-set stack (rule E11): the golden scripted model at ``model_url`` and its SearXNG
    stand-in at ``search_url``; no retry and no breaker on the model (a ``retrieval_only`` case's 503s are its own),
    ``code_exec`` without approval, long-term memory on, the semantic cache off (each of the k runs must run)."""
    return {"OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": "golden", "CONDUIT_MODEL": "scripted",
            "CONDUIT_TOOL_TIMEOUT_S": "30", "CONDUIT_SEARXNG_URL": search_url, "CONDUIT_WEB_ALLOW_PRIVATE": "true",
            "CONDUIT_MODEL_MAX_RETRIES": "0", "CONDUIT_MODEL_BREAKER_FAILURES": "100000",
            "CONDUIT_APPROVAL_POLICIES": '{"code_exec": "never"}', "CONDUIT_MEMORY_OFF_TENANTS": "[]",
            "CONDUIT_CACHE_ENABLED": "false"}
