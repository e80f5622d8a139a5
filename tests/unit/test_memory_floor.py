"""Rule M10 with the retriever's own embedder (USE, in process) and memory index (a Qdrant Edge shard in
a temporary directory): after 50 unrelated conversations, a question on a new topic recalls nothing,
while a fact and an episode that bear on a question are still recalled (issue 30)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from agentsim import T0, settings
from contracts.memory import MemoryItem, RecallCandidate
from services.orchestrator.agent import memory
from services.orchestrator.memoryio import weights
from services.retriever.embeddings import UseEmbedder
from services.retriever.memory import MemoryIndex
from services.retriever.store import EdgeVectorStore

SHM = Path("/dev/shm")
EPISODES = Path(__file__).parents[1] / "data" / "unrelated_episodes.jsonl"


class _OncePerBatch(UseEmbedder):
    """USE that embeds a batch of texts once per module: every test indexes the same 50 episodes, and a
    batch already embedded gives the very same vectors (~0.1 s each saved)."""

    def __init__(self) -> None:
        super().__init__()
        self._done: dict[tuple[str, ...], np.ndarray] = {}

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        key = tuple(texts)
        if key not in self._done:
            self._done[key] = super()._embed_batch(texts)
        return self._done[key]


@pytest.fixture(scope="module")
def index() -> Iterator[MemoryIndex]:
    """The index, its shard in memory when the machine has /dev/shm (``forget`` flushes the shard: ~0.25 s
    of fsync on a disk, each test)."""
    embedder = _OncePerBatch()
    with tempfile.TemporaryDirectory(prefix="memfloor", dir=SHM if SHM.is_dir() else None) as shard:
        idx = MemoryIndex(EdgeVectorStore(Path(shard), embedder.dim, 60), embedder)
        idx.store.exact = True
        yield idx
        idx.store.close()


def _episodes() -> list[MemoryItem]:
    rows = [json.loads(line) for line in EPISODES.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [memory.episode(tenant_id="t", user_id="u", task_id=f"task{n}", session_id=None, question=r["q"],
                           answer=r["a"], citations=[], now=T0 - timedelta(hours=n), episode_days=30)
            for n, r in enumerate(rows)]


def _fact(text: str) -> MemoryItem:
    [fact] = memory.extract_facts(text, tenant_id="t", user_id="u", task_id="f", session_id=None, now=T0,
                                  temporary_days=7)
    return fact


def recall(index: MemoryIndex, items: list[MemoryItem], question: str) -> list[str]:
    """What the retriever and rule M3/M10 would give for ``question`` (texts): the search's 20 best hits
    plus the user's facts it did not return, each with its cosine, then ``rank``."""
    index.forget("t", "u", None)
    index.index(items, [], None)
    by_id = {i.id: i for i in items}
    hits, _ = index.search("t", "u", question, 20, True, False)
    cands = [RecallCandidate(item=by_id[i], relevance=c) for i, c in hits]
    facts = [i for i in items if i.type == "fact" and i.id not in dict(hits)]
    cands += [RecallCandidate(item=f, relevance=c) for f, c in zip(facts, index.cosines(question, [f.text for f in facts]))]
    return [r.item.text for r in memory.rank(cands, T0, weights(settings()), question)]


LOOK_ALIKE = "USE puts a short episode that shares a word (报销, 事故, 申请) over the floor: docs/agent-rules.md, M10"


@pytest.mark.parametrize("question", [
    "What are the rules for reimbursing hotel costs on a business trip?",
    "What is the travel policy for hotel stays?",
    "农村土地承包经营权可以流转吗？",
    "How do I apply for a patent in China?",
    "小区停车位归谁所有？",
    pytest.param("公司出差的住宿费报销标准是怎么规定的？", marks=pytest.mark.xfail(strict=True, reason=LOOK_ALIKE)),
    pytest.param("差旅费报销有什么规定？", marks=pytest.mark.xfail(strict=True, reason=LOOK_ALIKE)),
    pytest.param("医疗事故鉴定由哪个机构做？", marks=pytest.mark.xfail(strict=True, reason=LOOK_ALIKE)),
])
def test_rule_m10_fifty_unrelated_episodes_recall_nothing_for_a_new_topic(index, question):
    episodes = _episodes()
    assert len(episodes) == 50 and len({e.id for e in episodes}) == 50
    assert recall(index, episodes, question) == []


def test_rule_m10_the_old_floor_recalled_five_of_fifty_unrelated_episodes(index):
    old = weights(settings(memory_min_relevance=0.1))
    episodes = _episodes()
    index.forget("t", "u", None)
    index.index(episodes, [], None)
    question = "What is the travel policy for hotel stays?"
    by_id = {e.id: e for e in episodes}
    hits, _ = index.search("t", "u", question, 20, True, False)
    cands = [RecallCandidate(item=by_id[i], relevance=c) for i, c in hits]
    assert len(memory.rank(cands, T0, old, question)) == 5


def test_rule_m10_a_related_fact_and_episode_are_still_recalled(index):
    city = _fact("我住在上海")
    got = recall(index, [*_episodes(), city], "上海的社保缴费基数下限是多少？")
    assert "我住在上海" in got[:2] and "社保缴费基数是怎么确定的" in " ".join(got[:2]), got  # ranked first
    name = _fact("我叫张三")
    assert recall(index, [*_episodes(), city, name], "我叫什么名字？") == ["我叫张三"]
