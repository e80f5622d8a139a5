"""Rule M10's measured relevance floors (docs/agent-rules.md, "Rule M10"), shared by the orchestrator's
recall ranking and the retriever's ``history_search`` (rule M12): one figure per embedding backend,
measured by ``python -m bench.memory_recall.run`` on ``bench/memory_recall/pairs.jsonl``."""

from __future__ import annotations

MEASURED_FLOORS = {"use": 0.43, "e5": 0.88}
"""Cosine floor per embedding backend: the middle of the widest run of floors where rule M10 has
precision and recall >= 0.9 on the labelled pairs."""
MEASURED_QUERY_FLOORS = {"use": 0.26, "e5": 0.87}
"""Rule M12: the cosine floor of ``history_search`` per backend, measured the same way with each question's
keyword form as the query (a model's search words score lower than a question); the lowest floor of the
widest run where precision and recall are >= 0.9 (an explicit search favours recall)."""
UNMEASURED_FLOOR = 0.0
"""The floor of a backend nobody measured (``openai``): set ``memory_min_relevance`` from its own bench run."""


def measured_floor(backend: str) -> float:
    """Rule M10: the relevance floor (a cosine) for ``backend`` (``use`` | ``e5`` | ``openai``)."""
    return MEASURED_FLOORS.get(backend, UNMEASURED_FLOOR)


def query_floor(backend: str) -> float:
    """Rule M12: the ``history_search`` floor (a cosine) for ``backend``."""
    return MEASURED_QUERY_FLOORS.get(backend, UNMEASURED_FLOOR)


def relevance_floor(min_relevance: float | None, backend: str) -> float:
    """Rule M10: the setting ``memory_min_relevance`` when set, else the floor measured for ``backend``
    (``embedding_backend``)."""
    return min_relevance if min_relevance is not None else measured_floor(backend)
