"""Semantic cache rules (rules C1-C3, docs/agent-rules.md) and what a task starts with from
memory (``Recalled``, ``apply_recall``).

- C1 lookup: only for a new session's first question, per tenant, when the cache is on and the
  client did not send ``Cache-Control: no-cache`` (``bypass``), and the question is not scoped to
  some documents or collections (rule Q4: ``off``, so neither read nor written); a hit needs cosine >=
  ``cache_min_similarity`` (0.95) between the two questions' embeddings.
- C2 store: a completed agent answer of a first turn that cites knowledge-base evidence and no
  web page, stopped by no limit, written without long-term memory (a personal answer is never
  shared with the tenant); kept ``cache_ttl_s`` (1 day), renewed on each hit; removed when a
  document it cites is re-ingested or deleted.
- C3 a hit still streams: its evidence, then the answer as ``answer.delta`` chunks, then
  ``task.completed`` with ``cache: hit`` and the measured latency; no model or tool call.
- M8 the recall (rules M3, C1) is asked of the retriever only for what can return something:
  memory only when the user has at least 1 stored item, the cache only when the tenant has at
  least 1 live entry; with neither, no request is sent (``recall_asks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from contracts.evidence import Citation
from contracts.memory import CacheEntry, CacheOutcome, MemoryItem
from contracts.stream import AnswerDelta, EvidenceEvent, MemoryNote, TraceEvent
from services.orchestrator.agent import endings
from services.orchestrator.agent.effects import Step
from services.orchestrator.agent.memory import history_offered, render
from services.orchestrator.agent.state import TaskState

REPLAY_CHUNK_CHARS = 24
"""Characters per ``answer.delta`` of a replayed answer."""


@dataclass(frozen=True)
class Recalled:
    """What the I/O layer found before the task: the ranked memory ``items`` (rule M3), the cache
    ``outcome`` and its ``cached`` entry (with its ``similarity``), the lookup's time and error."""

    items: list[MemoryItem] = field(default_factory=list)
    memory_on: bool = False
    has_history: bool = False
    """Rule M11: the recall found at least one of the user's episodes (earlier questions and answers)."""
    outcome: CacheOutcome = "off"
    cached: CacheEntry | None = None
    similarity: float | None = None
    duration_ms: float | None = None
    error: str | None = None


def lookup_outcome(first_turn: bool, enabled: bool, use_cache: bool, scoped: bool = False,
                   relative_year: bool = False) -> CacheOutcome:
    """Rule C1: ``off`` (not a first turn, or the cache is off), ``bypass`` (no-cache) or ``miss``
    (look it up; the I/O layer turns it into ``hit``). Rule Q4: a scoped question (``scoped``) is ``off``:
    an unscoped answer may cite outside its scope, and its own answer saw only part of the knowledge base.
    Rule V5: a question naming a relative year (``relative_year``: 今年, 去年, 明年 …) is ``off``: its meaning
    changes on 1 January, and a hit renews an entry, so a popular one would outlive its year."""
    if not first_turn or not enabled or scoped or relative_year:
        return "off"
    return "miss" if use_cache else "bypass"


def recall_asks(memory_wanted: bool, has_items: bool, outcome: CacheOutcome, tenant_cached: bool) -> tuple[bool, bool]:
    """Rule M8: ``(with_memory, with_cache)`` of the recall request, both False: send none.

    ``memory_wanted``: memory is on for the user and ``memory_recall_k`` > 0; ``has_items``: the
    user's memory hash holds at least 1 item (expired ones count until read); ``outcome``: rule
    C1's (only ``miss`` looks up); ``tenant_cached``: the tenant's cache marker is set (at least 1
    entry written or renewed within ``cache_ttl_s``). A skipped lookup keeps ``miss``: nothing
    the tenant has cached could match, so the answer may still be cached (rule C2)."""
    return memory_wanted and has_items, outcome == "miss" and tenant_cached


def apply_recall(state: TaskState, recalled: Recalled, asked: list[str] | None = None) -> Step:
    """Rule M4: put the recalled items into the model's messages (one system message after the
    system prompt) and name them in the state, the trace and a ``trace`` event (phase ``memory``).
    Rule M11: offer ``history_search`` when the user has history (``asked``: the request's tool list)."""
    step = Step(state)
    if history_offered(recalled.memory_on, recalled.has_history, asked, state.team):
        state.allowed_tools.append("history_search")
    state.memory_on = recalled.memory_on
    state.cache = recalled.outcome
    data = {"items": len(recalled.items), "cache": recalled.outcome, "lookup_ms": recalled.duration_ms,
            "error": recalled.error}
    if recalled.memory_on or recalled.outcome != "off":
        state.trace.append({"phase": "memory", **data})
    if not recalled.items or recalled.cached is not None:  # a replayed answer was written without them
        return step
    state.memory = [MemoryNote(id=i.id, type=i.type, text=i.text, task_id=i.task_id) for i in recalled.items]
    state.messages.insert(1, {"role": "system", "content": render(recalled.items)})
    return step.emit(TraceEvent(phase="memory", data={**data, "recalled": [m.model_dump() for m in state.memory]}))


def chunks(text: str, size: int = REPLAY_CHUNK_CHARS) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (the last may be shorter)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def replay(state: TaskState, recalled: Recalled, now: datetime) -> Step:
    """Rule C3: answer from the cached entry: evidence, answer deltas, completion (``cache: hit``)."""
    entry = recalled.cached
    assert entry is not None
    state.cache, state.allowed_tools, state.memory = "hit", [], []  # the cached answer used no memory
    state.evidence = list(entry.evidence)
    hit = {"outcome": "hit", "entry": entry.id, "from_task": entry.task_id, "similarity": recalled.similarity,
           "lookup_ms": recalled.duration_ms}
    state.trace.append({"phase": "cache", **hit})
    step = Step(state).emit(TraceEvent(phase="cache", data=hit))
    if state.evidence:
        step.emit(EvidenceEvent(items=state.evidence))
    step.emit(*(AnswerDelta(text=c) for c in chunks(entry.answer)))
    done = endings.complete(state, entry.answer, now, mark=False)
    state.confidence = entry.confidence
    return step.then(done)


def entry_for(state: TaskState, citations: list[Citation], now: datetime) -> CacheEntry | None:
    """Rule C2: the cache entry for a finished task, or None when it may not be cached."""
    if (state.status != "completed" or state.mode != "agent" or state.cache not in ("miss", "bypass")
            or state.memory or state.stop_reason or not citations or not state.answer):
        return None
    if any(e.kind == "history" for e in state.evidence):  # rule M12: written from one user's own history
        return None
    cited = {c.index for c in citations}
    evidence = [e for e in state.evidence if e.index in cited]
    if not evidence or any(e.kind == "web" for e in evidence):
        return None
    documents = sorted({e.document_id for e in evidence if e.document_id})
    return CacheEntry(id=state.task_id, tenant_id=state.tenant_id, question=state.question, answer=state.answer,
                      citations=citations, evidence=evidence, document_ids=documents, task_id=state.task_id,
                      created_at=now, confidence=state.confidence)
