"""The golden set's scripted model (rule E11, docs/evals.md): plays each case's ``model`` turns from
``evals/golden.yaml``, and serves a SearXNG-compatible ``/search`` for its web cases.

The turn is chosen from the request alone (no shared script), so the same question may run many times at once
(``pass^k``): the case is the one whose ``question`` is the request's last user message, and the turn is the
number of assistant messages after it. A turn of a case is one of

- ``{call: TOOL, args: {...}}``: call ``TOOL`` (default arguments: the question as ``query`` and a ``reason``)
  when the request offers it; when it is not offered the model says so (``未提供工具 TOOL``), as a model would;
- ``{answer: TEXT, cite: {title?, locator?, text?}}``: answer ``TEXT`` followed by ``[n]``, ``n`` being the
  evidence number whose block in the tool messages holds every given part (no such block: no citation);
- a case with ``run: retrieval_only``: every turn is an HTTP 503 (the endpoint is down for that question: with
  ``CONDUIT_MODEL_MAX_RETRIES=0`` the orchestrator answers from the knowledge base, rule A12).

A question of no case gets ``OK.``. Run as a process: ``python -m testkit.golden_model [--port N] [--golden FILE]``
prints its base URL (``conduit evals run`` starts it so; ops never imports testkit).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from testkit.scripted_model import ScriptedModel, Turn

GOLDEN = Path(__file__).resolve().parents[1] / "evals" / "golden.yaml"
_BLOCK = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


def evidence_blocks(messages: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """``(number, block text)`` of every numbered evidence block in the ``tool`` messages, in order."""
    out = []
    for m in messages:
        if m.get("role") != "tool":
            continue
        text = str(m.get("content") or "")
        starts = list(_BLOCK.finditer(text))
        for a, b in zip(starts, [*starts[1:], None]):
            out.append((int(a.group(1)), text[a.start():b.start() if b else len(text)]))
    return out


def cited_number(messages: list[dict[str, Any]], cite: dict[str, str]) -> int | None:
    """The first evidence number whose block's label line holds ``cite``'s ``title`` and ``locator`` and whose
    block holds its ``text`` (each optional)."""
    for n, block in evidence_blocks(messages):
        label = block.split("\n", 1)[0]
        if all(cite.get(k, "") in label for k in ("title", "locator")) and cite.get("text", "") in block:
            return n
    return None


def _offered(body: dict[str, Any]) -> set[str]:
    return {t.get("function", {}).get("name") for t in body.get("tools") or []}


def play(case: dict[str, Any], body: dict[str, Any]) -> Turn:
    """The turn ``case`` plays for the request ``body`` (see the module doc)."""
    if case.get("run") == "retrieval_only":
        return Turn(status=503, error={"message": "golden set: model down for this case", "type": "server_error"})
    messages = body.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    n = sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
    turns = case.get("model") or [{"answer": "OK."}]
    step = turns[min(n, len(turns) - 1)] if n < len(turns) else {"answer": turns[-1].get("answer", "OK.")}
    if "call" in step:
        tool = step["call"]
        if tool not in _offered(body):
            return Turn(content=f"未提供工具 {tool}。")
        args = {"query": case["question"], "reason": "golden set"} if tool != "code_exec" else {"reason": "golden set"}
        return Turn(tool_calls=[{"name": tool, "arguments": {**args, **(step.get("args") or {})}}])
    text = str(step.get("answer", "OK."))
    if step.get("cite"):
        number = cited_number(messages, step["cite"])
        text += f"[{number}]" if number else ""
    return Turn(content=text)


def load_cases(path: Path = GOLDEN) -> dict[str, dict[str, Any]]:
    """The golden file's cases by question."""
    return {c["question"]: c for c in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("cases", [])}


class GoldenModel(ScriptedModel):
    """A ``ScriptedModel`` answering every request with ``play`` of its case (``cases``: by question; ``add``
    more at run time) and serving ``GET /search?q=...&format=json`` as SearXNG does (``search_url``)."""

    def __init__(self, cases: dict[str, dict[str, Any]] | None = None) -> None:
        self.cases = dict(cases if cases is not None else load_cases())
        super().__init__(default=self._turn)  # type: ignore[arg-type]

    def add(self, case: dict[str, Any]) -> None:
        """Play ``case`` from now on (a case made while running, e.g. by ``conduit evals add``)."""
        self.cases[case["question"]] = case

    def _turn(self, body: dict[str, Any]) -> Turn:
        users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
        case = self.cases.get(str(users[-1].get("content") or "")) if users else None
        return play(case, body) if case else Turn(content="OK.")

    @property
    def search_url(self) -> str:
        """The SearXNG base URL to configure (``CONDUIT_SEARXNG_URL``)."""
        return f"http://127.0.0.1:{self.port}"

    async def _search(self, request: Request) -> JSONResponse:
        query = request.query_params.get("q", "")
        results = [{"url": f"https://golden-{i}.invalid/{abs(hash(query)) % 10_000}", "title": f"{query} ({i})",
                    "content": f"网页摘要 {i}：{query}。golden web snippet {i}."} for i in (1, 2)]
        return JSONResponse({"query": query, "results": results})

    def start(self) -> "GoldenModel":
        """Serve chat completions and ``/search``; returns self once the port is open."""
        self.serve([Route("/v1/chat/completions", self._completions, methods=["POST"]),
                    Route("/search", self._search, methods=["GET"])])
        return self


def main() -> None:  # pragma: no cover - a process for `conduit evals run`
    ap = argparse.ArgumentParser(description="the golden set's scripted model")
    ap.add_argument("--golden", type=Path, default=GOLDEN)
    args = ap.parse_args()
    model = GoldenModel(load_cases(args.golden)).start()
    print(json.dumps({"base_url": model.base_url, "search_url": model.search_url}), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":  # pragma: no cover
    main()
