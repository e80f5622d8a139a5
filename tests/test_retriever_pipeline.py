"""Each kb_search pipeline branch firing on a small real example (issue 3), plus mixed
Chinese/English search, query expansion and citation-ready evidence.

Real parts: USE embeddings, a Qdrant Edge shard in a temp dir, three real laws
from laws.db (~160 articles, a few seconds to ingest) and a Markdown file.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conduit.settings import Settings
from services.retriever.embeddings import UseEmbedder
from services.retriever.expansion import expand_query
from services.retriever.ingest import ingest_law_db, ingest_paths
from services.retriever.pipeline import GAP, KbSearcher
from services.retriever.store import open_store

VAT = "中华人民共和国增值税法"
PIT = "中华人民共和国个人所得税法"
LABOUR = "中华人民共和国劳动合同法"
HANDBOOK = """# Orion Labs 员工手册 Employee Handbook

## Remote work 远程办公

Employees may work remotely up to two days per week. 每周最多可以申请两天远程办公，需提前一个工作日在 OA 系统提交申请。

## Expense reimbursement 差旅报销

Travel expenses must be submitted within 30 days after the trip through the Expense Portal. 一线城市住宿每晚不超过 600 元。
"""

BENEFITS = "# Orion Labs 福利政策\n\n## 员工保险福利\n\n" + "\n\n".join(
    f"{kind}：公司为每位正式员工购买{kind}，保费由公司全额承担，员工入职满一个月后自动参保，离职当月停保；"
    f"理赔材料交给人力资源部统一办理，一般在十五个工作日内完成审核并支付到员工工资卡。"
    for kind in ("补充医疗保险", "意外伤害保险", "重大疾病保险", "定期寿险", "子女医疗保险", "父母体检福利",
                 "牙科保险", "眼科保险", "差旅意外保险", "年度体检套餐", "心理咨询服务")
) + "\n\n宠物保险：公司为每位员工的一只宠物购买年度宠物医疗保险，保额五千元。\n"
"""One ~1,100-char section (one chunk): the answer is its last paragraph, far past a 400-char budget."""


@pytest.fixture(scope="module")
def searcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbSearcher]:
    root = tmp_path_factory.mktemp("kbp")
    settings = Settings(data_dir=root)
    embedder = UseEmbedder()
    store = open_store(settings, embedder.dim)
    ingest_law_db(settings, law_names=[VAT, PIT, LABOUR], progress=False, embedder=embedder, store=store)
    (root / "handbook.md").write_text(HANDBOOK, encoding="utf-8")
    (root / "benefits.md").write_text(BENEFITS, encoding="utf-8")
    summary = ingest_paths(settings, [root / "handbook.md", root / "benefits.md"], tenant_id="orion", progress=False,
                           embedder=embedder, store=store)
    assert summary.documents == 2 and not summary.failures
    yield KbSearcher(settings, embedder, store)
    store.close()


def _with(searcher: KbSearcher, **update) -> KbSearcher:
    return KbSearcher(searcher.settings.model_copy(update=update), searcher.embedder, searcher.store, searcher.encoder)


def test_floor_drops_hits_below_the_dense_cosine_threshold(searcher: KbSearcher) -> None:
    outcome = searcher.search("今天晚饭吃什么好呢", "default")
    first = outcome.attempts[0]
    assert first.returned > first.kept  # the floor (0.30 on the dense cosine) removed hits
    assert all(e.score is not None and e.score >= 0.30 for e in outcome.evidence)
    # raise the floor: nothing passes, and the fused (RRF) score is never compared with it
    strict = _with(searcher, retrieval_min_score=0.95).search("今天晚饭吃什么好呢", "default")
    assert strict.evidence == [] and all(a.kept == 0 for a in strict.attempts)


def test_compressed_retry_merges_by_chunk_id(searcher: KbSearcher) -> None:
    outcome = searcher.search("请问一下，我想知道到底试用期最长可以是多久呢？？", "default")
    kinds = [a.kind for a in outcome.attempts]
    assert kinds[:2] == ["original", "compressed"] and outcome.attempts[1].query == "试用期最长"
    ids = [e.chunk_id for e in outcome.evidence]
    assert len(ids) == len(set(ids))  # merged by chunk id
    assert (outcome.evidence[0].title, outcome.evidence[0].locator) == (f"《{LABOUR}》", "第十九条")


def test_topic_follow_up_searches_the_missing_topic(searcher: KbSearcher) -> None:
    # expansion off: the first round sees only the colloquial 个税 and its top 6 are all VAT articles
    outcome = _with(searcher, retrieval_query_expansion=False).search("个税和增值税的税率", "default")
    rounds = [(a.kind, a.query) for a in outcome.attempts if a.kind.startswith("topic:")]
    assert rounds == [("topic:个人所得税", "个人所得税 税率")]
    assert PIT in {e.metadata.get("law_name") for e in outcome.evidence}


def test_paragraph_pick_keeps_the_answer_past_the_budget(searcher: KbSearcher) -> None:
    assert 1000 < len(BENEFITS) < 1500  # one chunk (FILE_CHUNK_CHARS 1,500)
    outcome = _with(searcher, chunk_max_chars=400).search("公司给员工的宠物买保险吗？", "orion")
    item = next(e for e in outcome.evidence if e.title == "《Orion Labs 福利政策》")
    assert len(item.text) <= 400
    assert "宠物医疗保险" in item.text and GAP in item.text  # picked by query bigrams, not the first 400 chars


def test_mixed_chinese_and_english_search(searcher: KbSearcher) -> None:
    en = searcher.search("How many days per week can employees work remotely?", "orion").evidence
    assert en[0].title == "《Orion Labs 员工手册 Employee Handbook》" and "two days per week" in en[0].text
    mixed = searcher.search("Expense Portal 报销 deadline", "orion").evidence
    assert mixed[0].locator and "Expense reimbursement" in mixed[0].locator and "30 days" in mixed[0].text
    vat = searcher.search("VAT rate 小规模纳税人 简易计税 征收率", "default").evidence
    assert (f"《{VAT}》", "第十一条") in [(e.title, e.locator) for e in vat[:3]]


def test_query_expansion_turns_everyday_words_into_legal_terms(searcher: KbSearcher) -> None:
    assert expand_query("个税汇算清缴在什么时间办？") == "个税汇算清缴在什么时间办？ 个人所得税"
    assert expand_query("增值税税率") == "增值税税率"
    # 辞职 -> 劳动者解除劳动合同 提前通知用人单位 (the statute's words); the bench measures the gain
    q = "我想辞职，要提前多少天跟公司说？"
    expanded = searcher.search(q, "default").evidence
    assert (expanded[0].title, expanded[0].locator) == (f"《{LABOUR}》", "第三十七条")


def test_evidence_is_citation_ready_and_tenant_scoped(searcher: KbSearcher) -> None:
    law = searcher.search("试用期最长多久", "default").evidence[0]
    assert law.title == f"《{LABOUR}》" and law.locator == "第十九条" and law.kind == "original"
    assert law.chunk_id and law.document_id and law.metadata["version_date"] and law.metadata["status"] == "现行有效"
    own = searcher.search("remote work 远程办公", "orion").evidence[0]
    assert own.title.startswith("《Orion Labs") and own.locator and own.metadata["source"] == "file"
    other = searcher.search("remote work 远程办公", "someone-else").evidence
    assert all(not e.title.startswith("《Orion Labs") for e in other)
