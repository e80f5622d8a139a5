"""Query-side expansion of abbreviations and colloquial words into legal terms.

docs/retrieval.md "Measured before the pipeline was built": most misses on colloquial questions
are abbreviations and everyday words against the statute's wording (个税 vs
个人所得税, 社保 vs 社会保险, 税务局 vs 税务机关, 看病 vs 医疗, 辞职 vs 解除劳动合同).
``expand_query`` appends the legal term after the question when the everyday
word occurs and the legal term does not, so both the sparse (BM25) and the dense
encoders see it; the original words stay. No model call; ~10 µs per query.

The table is hand-written from the misses of bench/retrieval/laws.jsonl (the tuning
set) and common usage; it is deliberately small and general (no per-question entries).
bench/retrieval/laws_heldout.jsonl was written separately and is never used to edit it:
on those questions the table fires about half as often (26 of 55 vs 56 of 69).
"""

from __future__ import annotations

EXPANSIONS: dict[str, tuple[str, ...]] = {
    # taxes and authorities
    "个税": ("个人所得税",),
    "税务局": ("税务机关",),
    "交税": ("缴纳税款",),
    "欠税": ("欠缴税款",),
    "报税": ("纳税申报",),
    "退税": ("退还税款",),
    "小微企业": ("小型微利企业",),
    "税交多少": ("税率",),
    "交多少税": ("税率",),
    "小商户": ("个体工商户", "小规模纳税人"),
    "个体户": ("个体工商户",),
    "卖得少": ("销售额未达到起征点",),
    # social insurance and work
    "社保": ("社会保险",),
    "医保": ("基本医疗保险",),
    "养老金": ("基本养老金",),
    "失业金": ("失业保险金",),
    "公积金": ("住房公积金",),
    "辞职": ("劳动者解除劳动合同", "提前通知用人单位"),
    "离职": ("解除劳动合同",),
    "辞退": ("用人单位解除劳动合同",),
    "开除": ("用人单位解除劳动合同",),
    "裁员": ("经济性裁员",),
    "裁掉": ("解除劳动合同", "经济补偿"),
    "补偿金": ("经济补偿",),
    "老板": ("用人单位",),
    "公司": ("用人单位",),
    "员工": ("劳动者",),
    "加班": ("延长工作时间",),
    "干不好": ("不能胜任工作",),
    "换岗": ("调整工作岗位",),
    "调岗": ("调整工作岗位",),
    "同行": ("竞业限制",),
    "女的": ("性别",),
    "工资": ("劳动报酬",),
    "童工": ("未满十六周岁的未成年人",),
    "年假": ("带薪年休假",),
    "带薪休假": ("带薪年休假",),
    "生孩子": ("生育",),
    "仲裁": ("劳动争议仲裁",),
    # health
    "看病": ("医疗", "就医"),
    "出国看病": ("境外就医",),
    "报销": ("基金支付",),
    # family and civil life
    "领结婚证": ("结婚",),
    "结婚证": ("结婚",),
    "家暴": ("家庭暴力",),
    "离婚冷静期": ("撤回离婚登记申请",),
    "反悔": ("撤回",),
    "小孩": ("未成年人",),
    "孩子": ("未成年人",),
    "成年人": ("十八周岁",),
    "遗产": ("继承",),
    "不住在一起": ("分开居住",),
    "老人": ("老年人",),
    "手写": ("自书",),
    "扔东西": ("抛掷物品",),
    "砸到": ("造成他人损害",),
    "狗": ("饲养的动物",),
    "咬": ("造成他人损害",),
    "捡到": ("拾得遗失物",),
    "租房": ("租赁",),
    "借钱不还": ("诉讼时效",),
    "起诉": ("诉讼时效",),
    "开发商": ("房地产开发企业", "商品房预售"),
    "没盖好": ("预售",),
    "噪音": ("噪声",),
    "派出所": ("公安机关",),
    # consumers, traffic, ip, misc
    "假货": ("欺诈",),
    "退货": ("退货",),
    "无理由退货": ("七日内退货",),
    "网上买": ("网络购买商品",),
    "酒驾": ("饮酒后驾驶机动车",),
    "喝了酒开车": ("饮酒后驾驶机动车",),
    "喝酒开车": ("饮酒后驾驶机动车",),
    "斑马线": ("人行横道",),
    "版权": ("著作权",),
    "保护多少年": ("保护期",),
    "保护几年": ("保护期",),
    "续期": ("续展",),
    "身份证": ("居民身份证",),
    "App": ("个人信息处理者",),
    "app": ("个人信息处理者",),
    "最好的": ("最佳", "最高级"),
    "买房": ("房屋权属转移",),
    "买新车": ("车辆购置税",),
    "手机号": ("个人信息",),
}
"""Everyday word -> legal terms appended when absent (longest words are matched first)."""

_ORDER = sorted(EXPANSIONS, key=len, reverse=True)


def expand_query(query: str) -> str:
    """``query`` followed by the legal terms of the everyday words it contains.

    Example: 「个税汇算清缴在什么时间办？」 -> 「个税汇算清缴在什么时间办？ 个人所得税」.
    A word inside a longer matched word is skipped (出国看病 adds 境外就医 only);
    a term already in the query is not repeated. Returns ``query`` unchanged when
    nothing matches.
    """
    extra: list[str] = []
    covered = ""
    for word in _ORDER:
        if word in query and word not in covered:
            covered += " " + word
            for term in EXPANSIONS[word]:
                if term not in query and term not in extra:
                    extra.append(term)
    return f"{query} {' '.join(extra)}" if extra else query
