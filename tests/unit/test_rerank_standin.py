"""The cross-encoder stand-in of bench/retrieval (issue 40): its weights were learned on the tuning and held-out
sets only and name the features it computes; what it reads of a K11 request (sentences, the labelled article's
place, the question's ask answered in kind) is what the docs say. No embedder is loaded here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "retrieval"


def _module(name: str):  # noqa: ANN202 - a bench script loaded by path
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_retrieval_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_weights_never_saw_the_hard_set_and_name_every_feature() -> None:
    standin = _module("standin")
    weights = json.loads((BENCH / "standin_weights.json").read_text(encoding="utf-8"))
    assert weights["features"] == list(standin.FEATURES)
    assert len(weights["coef"]) == len(standin.FEATURES)
    assert set(weights["trained_on"]) == {"tune", "heldout"}


def test_a_request_is_read_as_k11_sends_it() -> None:
    standin, bench = _module("standin"), _module("rerank_standin")
    doc = "《中华人民共和国劳动合同法》 第八十七条\n用人单位违反本法规定解除劳动合同的，应当支付赔偿金。短句。"
    assert standin.body(doc).startswith("用人单位")
    assert standin.sentences(doc) == ["用人单位违反本法规定解除劳动合同的，应当支付赔偿金"]  # 「短句」 is under 6 characters
    row = {"law_name": "中华人民共和国劳动合同法", "article_no": "第八十七条"}
    assert bench.gold_index(row, ["《中华人民共和国劳动法》 第八十七条\n…", doc]) == 1
    assert bench.gold_index(row, ["《中华人民共和国劳动法》 第八十七条\n…"]) is None
    asks = [bool(a.search("公司违法开除我，赔多少")) for a, _ in standin.INTENTS]
    held = [bool(b.search(standin.body(doc))) for _, b in standin.INTENTS]
    assert asks[0] and asks[2] and held[2] and not held[0]  # 多少 asks a number the text lacks; 赔 finds 赔偿
