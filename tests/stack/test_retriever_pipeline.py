"""Each kb_search pipeline branch firing on a small real example (issue 3), plus mixed
Chinese/English search, query expansion and citation-ready evidence.

Real parts: USE embeddings, a Qdrant Edge shard in a temp dir, three real laws
from laws.db (~160 articles, a few seconds to ingest) and a Markdown file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conduit.runtime.settings import Settings
from services.retriever.documents import CHILD_CHUNK_CHARS, file_chunks, law_chunks, parent_chunk_id, point_id
from services.retriever.embeddings import UseEmbedder
from services.retriever.expansion import expand_query
from services.retriever.ingest import ingest_law_db, ingest_paths
from services.retriever.packing import GAP
from services.retriever.pipeline import KbSearcher
from services.retriever.lawdb import articles_by_law, list_laws
from services.retriever.store import SearchFilter, open_store

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
"""One ~1,100-char section (one parent): the answer is its last paragraph, far past a 400-char budget."""


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
    yield KbSearcher(settings.retrieval, embedder, store)
    store.close()


def _with(searcher: KbSearcher, **update) -> KbSearcher:
    return KbSearcher(searcher.retrieval.model_copy(update=update), searcher.embedder, searcher.store, searcher.encoder)


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
    outcome = _with(searcher, retrieval_query_expansion=False).search("个税和增值税的征收率", "default")
    rounds = [(a.kind, a.query) for a in outcome.attempts if a.kind.startswith("topic:")]
    assert rounds == [("topic:个人所得税", "个人所得税 征收率")]
    assert PIT in {e.metadata.get("law_name") for e in outcome.evidence}


def test_paragraph_pick_keeps_the_answer_past_the_budget(searcher: KbSearcher) -> None:
    assert 1000 < len(BENEFITS) < 1500  # one parent chunk (PARENT_CHUNK_CHARS 4,000), two children
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


# ---------------------------------------------------------------- parent/child chunks (rule K5)
_P1 = ("考勤管理：员工每天上午九点前打卡上班，下午六点后打卡下班，迟到三次按旷工半天处理。忘记打卡的，须在两个工作日内在考勤系统中补签，"
      "并由直属主管审批，每月补签不得超过三次。考勤记录每月五日前由人力资源部汇总，员工可以在自助平台查询本人的记录，并在三日内提出异议。"
      "外出办事须在系统中登记外出事由、地点和预计返回时间，返回后及时销记。因公出差的，按出差审批单记为正常出勤，不需要另行打卡。"
      "弹性工作制适用于研发和设计岗位，核心工作时间为上午十点至下午四点，其余时间可以由员工自行安排，但每日工作时间累计不少于八小时。"
      "连续旷工三日或一年内累计旷工五日的，属于严重违反规章制度，公司可以依法解除劳动合同。病假须提供二级以上医院出具的诊断证明，"
      "病假期间按当地最低工资标准的百分之八十以上发放病假工资。事假须提前三个工作日申请，每次不超过五天，全年累计不超过十五天，事假期间不发放工资。"
      "婚假、产假、陪产假、丧假按国家和地方规定执行，休假前须提交相关证明材料。年休假按工龄计算，累计工作满一年不满十年的每年五天，"
      "满十年不满二十年的每年十天，满二十年的每年十五天；年休假原则上在当年度休完，确因工作需要不能安排的，可以跨一个年度安排。")
_P2 = ("加班与值班：因工作需要安排加班的，须提前填写加班申请单，写明加班事由、时间和人员，经部门负责人批准后生效，未经批准的不计为加班。"
      "工作日延长工作时间的，可以按一比一安排调休，调休须在三个月内使用完毕，逾期作废；休息日安排工作又不能安排补休的，按照不低于工资的百分之二百支付工资报酬；"
      "法定休假日安排工作的，按照不低于工资的百分之三百支付工资报酬，不以调休代替。加班时长以考勤系统的打卡记录为准，单次加班不少于一小时方可计入。"
      "部门负责人应当合理安排工作任务，每日延长工作时间一般不超过一小时，因特殊原因需要延长的，每日不超过三小时，每月不超过三十六小时。"
      "节假日期间，各部门按照行政部发布的值班表安排值班，值班人员须保持通讯畅通，遇到紧急情况及时向值班领导报告并做好记录。"
      "值班不同于加班，值班期间可以休息，公司按每天两百元的标准发放值班补贴。研发部门的线上系统实行轮值制度，轮值人员在非工作时间接到告警后须在十五分钟内响应，"
      "处理时间超过一小时的部分计为加班。孕期和哺乳期的女员工不得安排加班和夜班，未成年工不得安排加班。加班餐费按每次五十元的标准凭发票报销，"
      "晚上十点以后离开公司的，可以凭打车发票报销交通费用，报销须在次月十日前提交。")
_P3 = ("子女教育补贴：员工子女教育补贴的标准为每名子女每年三千六百元，由员工在每年九月三十日前向人力资源部提交学校出具的在读证明和出生证明后申领，"
      "补贴随当年十二月的工资一并发放。子女须为全日制在读的小学、初中、高中或大学学生；夫妻双方均在公司任职的，同一子女只能由一方申领。"
      "入职未满六个月的员工，当年补贴按实际在职月数折算。")
_P7 = ("差旅管理：员工出差须提前在系统中提交出差申请，写明出差事由、目的地、行程和预算，经部门负责人审批后方可预订交通和住宿。"
      "国内出差原则上乘坐高铁二等座或飞机经济舱，单程四小时以内的优先选择高铁；确需乘坐头等舱或商务座的，须事先经分管副总裁批准。"
      "住宿标准为一线城市每晚不超过六百元，省会城市每晚不超过四百五十元，其他城市每晚不超过三百五十元，超出部分由员工自行承担。"
      "出差期间的伙食补助按每天一百元发放，市内交通补助按每天八十元发放，不再另行报销餐费和市内交通费。出差结束后须在三十日内提交报销单，"
      "并附行程单、住宿发票和出差审批单，逾期提交的财务部有权不予报销。")
_P8 = ("信息安全：员工应妥善保管工作账号和密码，密码长度不少于十二位，并每九十天更换一次，不得与他人共用账号。离开座位时须锁定电脑屏幕，"
      "下班后须关闭电脑。不得使用个人网盘、即时通讯软件传输公司文件，对外发送含有客户信息的文件须加密并经部门负责人批准。"
      "发现疑似钓鱼邮件、病毒或数据泄露的，须立即向信息安全部报告，不得自行处理或转发。公司定期开展安全检查和演练，员工应当积极配合。"
      "违反信息安全规定造成损失的，视情节轻重给予警告、记过直至解除劳动合同的处分。")
_P9 = ("离职交接：员工主动辞职的，须提前三十日以书面形式通知公司，试用期内须提前三日通知。离职前须完成工作交接，交接内容包括在办事项、文件资料、"
      "账号权限、客户联系方式和公司财物，交接清单须由接收人和部门负责人签字确认。未完成交接的，公司可以暂缓办理离职手续。"
      "离职当月的工资在最后工作日后的下一个发薪日发放，未休完的年休假按规定折算工资。公司在员工离职后十五日内为其办理档案和社会保险关系的转移手续，"
      "并出具解除或者终止劳动合同的证明。离职员工负有保密义务和竞业限制义务的，按照双方签订的协议执行。")
_P10 = ("办公环境：员工应保持办公区域整洁，个人物品放置在指定位置，下班前清理桌面并关闭电源。会议室须通过系统预订，使用完毕后恢复原状，"
       "超过十五分钟未到场的预订将自动取消。办公区禁止吸烟，吸烟须到指定的吸烟区。访客须在前台登记并由接待员工全程陪同，不得进入机房和财务室。"
       "公司提供免费的茶水和咖啡，员工应节约使用，不得带出公司。节假日前行政部会组织安全检查，员工应配合关闭门窗和电器。")
_P11 = ("绩效考核：公司实行季度考核和年度考核相结合的绩效管理制度。每季度初，员工与直属主管共同制定本季度的工作目标和衡量标准，"
       "季度末由员工进行自评，主管结合工作成果、协作情况和能力表现给出评分，考核结果分为优秀、良好、合格和待改进四个等级。"
       "年度考核结果以四个季度的结果为基础，并参考跨部门同事的反馈意见，由部门考核小组评定。考核结果为优秀的员工，在调薪、晋升和评优时优先考虑；"
       "连续两个季度考核结果为待改进的，公司将制定绩效改进计划，并安排为期两个月的辅导期。员工对考核结果有异议的，可以在结果公布后五个工作日内向人力资源部提出书面申诉，"
       "人力资源部应当在十个工作日内组织复核并给予答复。")
_P12 = ("薪酬发放：员工工资由基本工资、岗位津贴、绩效奖金和各类补贴组成，每月十五日以银行转账的方式发放上一个自然月的工资，遇节假日提前至最近的工作日。"
       "公司依法代扣代缴个人所得税以及应由个人缴纳的社会保险费和住房公积金，员工可以在自助平台查看电子工资条。对工资数额有疑问的，"
       "应当在收到工资条后五个工作日内向人力资源部提出，逾期视为无异议。年终奖根据公司年度经营业绩和个人年度考核结果确定，于次年春节前发放；"
       "年终奖发放前已经离职的员工，不再发放当年的年终奖。调薪每年进行一次，原则上在每年四月生效，晋升员工的薪酬自晋升当月起调整。")
_P13 = ("健康与安全：公司关心员工的身体和心理健康，鼓励员工合理安排工作和休息，参加公司组织的体育锻炼和文体活动。各部门每季度可以申请团队建设经费，人均标准为二百元，用于组织集体运动或者户外活动。公司每年组织员工进行一次免费体检，体检项目根据年龄和性别分为不同的套餐，员工可以在规定时间内自行预约体检机构。"
       "工作中发生意外伤害的，应当立即报告部门负责人和行政部，并在二十四小时内填写事故报告单；公司将依法在规定时限内申请工伤认定，"
       "员工应当配合提供病历、诊断证明和相关的证人证言。办公区域配备急救箱和自动体外除颤器，行政部每年组织两次消防演练和急救培训。"
       "员工发现安全隐患的，有权并且应当及时报告，公司对报告重大安全隐患的员工给予奖励。")
_P14 = ("费用报销：日常费用报销实行先审批后支出的原则，单笔支出超过两千元的须事先提交费用申请并经部门负责人批准。报销时须提供合法有效的发票，"
       "发票抬头须为公司全称并填写统一社会信用代码，增值税专用发票须在开具之日起三百六十日内交财务部认证。招待费须注明招待对象、人数和事由，"
       "人均标准不超过三百元，超过标准的须经分管副总裁批准。报销单经部门负责人和财务部审核后，款项在十个工作日内转入员工工资卡。"
       "弄虚作假、虚开发票或重复报销的，一经查实，除追回款项外，按严重违反规章制度处理。每年十二月二十日后停止受理当年的报销，"
       "未报销的费用顺延至次年一月办理，但不得跨越两个自然年度。员工借支备用金的，须在事项结束后十五日内办理报销冲账，逾期未冲账的从工资中扣回。")
_P15 = ("行为规范：员工应当遵守国家法律法规和公司规章制度，诚实守信，爱岗敬业，尊重同事，不得有任何形式的歧视和骚扰行为。"
       "员工不得利用职务便利为自己或他人谋取不正当利益，不得收受供应商、客户或其他合作方的礼品、礼金和有价证券，确实无法拒绝的，须在三个工作日内上交行政部登记处理。"
       "员工与公司存在利益冲突的，包括本人或近亲属在供应商、客户或竞争对手处任职或持股，须主动向人力资源部和法务部书面申报。"
       "员工在社交媒体上发表言论，不得以公司名义发布未经授权的信息，不得发布损害公司声誉的内容。公司设立举报邮箱，对实名举报的员工严格保密，"
       "任何人不得打击报复举报人，一经查实，从严处理。")
LONG_SECTION = "\n\n".join([_P1, _P2, _P3, _P7, _P8, _P9, _P11, _P14, _P12, _P13, _P15, _P10])
"""One ~3,800-char section (one parent chunk); the answer (_P3) is its third paragraph."""
LONG_QUESTION = "孩子上学公司每年给多少教育补贴？"


def test_long_section_answer_is_found_through_a_child_and_returned_as_its_parent(
        searcher: KbSearcher, tmp_path: Path) -> None:
    doc = tmp_path / "rules.md"
    doc.write_text(f"# 员工手册\n\n## 员工管理细则\n\n{LONG_SECTION}\n\n## 附则\n\n本手册由人力资源部负责解释。\n",
                   encoding="utf-8")
    assert 3500 <= len(LONG_SECTION) <= 4000 and LONG_SECTION.split("\n\n")[2] == _P3
    embedder = searcher.embedder
    # one chunk per section (the old layout) embeds under the 0.30 floor for this question
    whole = embedder.embed([f"员工手册 员工管理细则\n{LONG_SECTION}"])[0] @ embedder.embed_query(LONG_QUESTION)
    assert whole < 0.30
    chunks = file_chunks(doc, "acme")
    assert {c.payload["parent_position"] for c in chunks} == {0, 1}  # the section, the closing note
    assert all(len(c.payload["text"]) <= CHILD_CHUNK_CHARS for c in chunks) and len(chunks) >= 5
    assert all(c.payload["parent_text"] == LONG_SECTION for c in chunks if c.payload["parent_position"] == 0)
    doc_id = chunks[0].document_id
    settings = Settings(data_dir=tmp_path / "kb")
    store = open_store(settings, embedder.dim)
    try:
        summary = ingest_paths(settings, [doc], tenant_id="acme", progress=False, embedder=embedder, store=store)
        assert summary.embedded == summary.chunks == len(chunks) == store.count()
        outcome = KbSearcher(settings.retrieval, embedder, store).search(LONG_QUESTION, "acme")
        first = outcome.evidence[0]
        assert first.chunk_id == parent_chunk_id(doc_id, 0) and first.locator == "员工管理细则"
        assert first.score is not None and first.score >= 0.30  # the best child's dense cosine
        assert _P3 in first.text and len(first.text) <= 2000  # parent text, paragraph-picked to CHUNK_MAX_CHARS
        assert len({e.chunk_id for e in outcome.evidence}) == len(outcome.evidence)  # one item per parent
        meta = first.metadata
        assert meta["section"] == "员工管理细则" and meta["version_date"] and meta["ingested_at"]
        assert meta["source"] == "file" and "parent_text" not in meta
        # re-ingest: nothing changes
        again = ingest_paths(settings, [doc], tenant_id="acme", progress=False, embedder=embedder, store=store)
        assert again.embedded == 0 and again.removed == 0 and again.unchanged == len(chunks) == store.count()
        # a new version replaces the old one (the split moved: old child ids are removed)
        doc.write_text(f"# 员工手册\n\n## 员工管理细则\n\n{_P3}\n", encoding="utf-8")
        new = ingest_paths(settings, [doc], tenant_id="acme", progress=False, embedder=embedder, store=store)
        assert new.chunks == 1 and store.count() == 1 and new.removed == len(chunks) - 1
        # delete by document id removes every child (and so every parent)
        assert store.delete_by_document(doc_id) == 1 and store.count() == 0
    finally:
        store.close()


# ---------------------------------------------------------------- item chunks of long articles
def test_item_chunk_hits_merge_back_to_their_article(searcher: KbSearcher) -> None:
    """个税法第四条 lists ten exemptions (~450 chars); its item 「（二）国债和国家发行的金融债券利息」
    is matched as an item chunk and returned as the whole article, once, citable as 第四条."""
    (pit,) = list_laws(law_names=[PIT])
    articles = articles_by_law([pit])[pit.law_id]
    position = next(i for i, a in enumerate(articles) if a.article_no == "第四条")
    article_id = point_id(f"law:{pit.law_id}", position)
    question = "国债利息免征个人所得税吗？"
    raw = searcher.store.hybrid_query(searcher.embedder.embed_queries([question, question]),
                                      searcher.encoder.encode_query(question), SearchFilter.for_tenant("default"), limit=12)
    items = [h for h in raw if h.payload.get("parent_id") == article_id]
    assert len(items) >= 2 and all(h.payload["text"] != articles[position].text for h in items)  # several items matched
    evidence = searcher.search(question, "default").evidence
    first = evidence[0]
    assert (first.title, first.locator, first.chunk_id) == (f"《{PIT}》", "第四条", article_id)
    assert first.text == articles[position].text  # the article, not the item (<= CHUNK_MAX_CHARS: whole)
    assert first.metadata["article_no"] == "第四条" and "parent_text" not in first.metadata
    assert [e.locator for e in evidence if e.metadata.get("law_name") == PIT].count("第四条") == 1
    assert first.score == pytest.approx(max(h.dense_score for h in items), abs=1e-4)  # the best item's cosine
    n_chunks = len(law_chunks(pit, articles))
    assert searcher.store.count(SearchFilter(document_ids=(f"law:{pit.law_id}",))) == n_chunks > len(articles)
