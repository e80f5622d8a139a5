"""Input guardrails (rule G1, docs/agent-rules.md): questions that try to take over the agent are
rejected before any model call, with a category.

Categories (``CATEGORIES``): ``instruction_override`` (ignore previous instructions, fake
system messages), ``role_play`` (DAN, developer mode, "no restrictions" personas),
``prompt_extraction`` (reveal the system prompt), ``encoded_smuggling`` (an attack hidden in
base64, hex, ``\\uXXXX`` escapes or ROT13, invisible or bidirectional control characters, a
"decode and execute" request) and ``privilege_escalation`` (act as admin, bypass approval, read
secrets or other tenants' data). Patterns cover Chinese and English.

How a text is read: NFKC-normalised (full-width letters, compatibility forms), zero-width
characters removed, common Cyrillic/Greek look-alike letters mapped to Latin, single letters
spaced apart ("i g n o r e") joined; encoded runs are decoded and checked again.

The corpus ``evals/guardrails.jsonl`` (attacks and harmless look-alikes) is the gate:
0 missed, 0 false alarms (``tests/unit/test_rule_guardrails.py``, ``conduit evals policy``).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from dataclasses import dataclass

CATEGORIES = ("instruction_override", "role_play", "prompt_extraction", "encoded_smuggling", "privilege_escalation")
"""Every rejection category, in the order they are checked."""


@dataclass(frozen=True)
class Rejection:
    """Why a text was rejected: ``category`` (one of ``CATEGORIES``) and the matched ``rule`` name."""

    category: str
    rule: str

    def message(self, text: str) -> str:
        """A short message in the language of ``text`` (Chinese when it has CJK characters)."""
        if re.search(r"[\u4e00-\u9fff]", text):
            return f"输入被拒绝：疑似提示注入（{_ZH_NAMES[self.category]}）。请直接提出你的问题。"
        return f"Input rejected: it looks like a prompt injection ({self.category.replace('_', ' ')}). Please ask your question directly."


_ZH_NAMES = {"instruction_override": "覆盖系统指令", "role_play": "角色扮演越狱", "prompt_extraction": "索要系统提示词",
             "encoded_smuggling": "编码绕过", "privilege_escalation": "越权请求"}

_I = re.IGNORECASE | re.DOTALL
_VERB_EN = r"(?:ignore|disregard|forget|override|bypass|skip|drop|abandon|discard|neglect)"
_PRIOR_EN = r"(?:previous|prior|above|earlier|preceding|system|original|initial|all|your|those|these|any)"
_VERB_ZH = r"(?:忽略|忽视|无视|忘记|忘掉|不要理会|别管|跳过|覆盖|抛开|抛弃|丢掉|放弃|不再遵守|停止遵守)"
_PRIOR_ZH = r"(?:之前|以前|此前|上面|上述|先前|前面|原来|原有|原先|原始|初始|你的|您的|所有|全部|一切|系统)"
_RULES_ZH = r"(?:指令(?!性)|指示|提示词|系统提示|规则|设定|约束|限制|命令|要求|安全策略)"
_REVEAL_ZH = r"(?:输出|打印|显示|告诉我|透露|泄露|重复|复述|给我看|展示|发给我|列出|说出|念出|贴出|导出|写出)"
_SECRET_ZH = r"(?:系统提示词?(?!音)|系统指令|系统消息|隐藏(?:的)?(?:指令|提示)|初始(?:的)?(?:指令|提示)|内部(?:的)?(?:指令|提示词)|原始(?:的)?(?:指令|提示)|你的提示词|你的设定|你的指令|开发者消息|预设指令)"

PATTERNS: dict[str, list[tuple[str, re.Pattern[str]]]] = {
    "instruction_override": [
        ("en-ignore-instructions", re.compile(
            rf"\b{_VERB_EN}\b(?:\s+\w+){{0,3}}?\s+{_PRIOR_EN}\b(?:\s+\w+){{0,3}}?\s+(?:instructions?|prompts?|directives?|directions|programming|guidelines|commands?|context|messages?)\b", _I)),
        ("en-ignore-rules", re.compile(
            rf"\b{_VERB_EN}\b\s+(?:all|your|every|any)\s+(?:of\s+)?(?:your\s+|the\s+)?(?:previous\s+|prior\s+|above\s+)?(?:rules|restrictions|constraints|limitations|filters|guardrails|safety\s+\w+)\b", _I)),
        ("en-new-instructions", re.compile(r"\b(?:new|updated|real|actual)\s+(?:system\s+)?instructions?\s*:", _I)),
        ("en-from-now-on", re.compile(r"\bfrom\s+now\s+on\b[^.\n]{0,20}\byou\s+(?:are|will|must|shall|only)\b", _I)),
        ("en-no-longer", re.compile(r"\byou\s+are\s+no\s+longer\s+(?:an?\s+)?(?:assistant|conduit|bound|restricted|limited)", _I)),
        ("fake-role-marker", re.compile(r"(?:<\|im_start\|>\s*system|\[/?(?:system|INST)\]|^\s*#{2,}\s*system\b|^\s*system\s*(?:prompt|override|message)?\s*:|</?system>)", _I | re.MULTILINE)),
        ("en-system-override", re.compile(r"\b(?:system|admin|developer)\s+override\b", _I)),
        ("zh-ignore", re.compile(rf"(?<![我他她它们司])(?<!我们){_VERB_ZH}.{{0,6}}{_PRIOR_ZH}.{{0,10}}{_RULES_ZH}", _I)),
        ("zh-from-now-on", re.compile(r"(?:从现在(?:开始|起)|从此刻起|接下来)[，,\s]*你(?:就)?(?:是|将|必须|要|只能|只需|只会|不再)")),
        ("zh-new-instructions", re.compile(r"(?:新的|最新的?|真正的)(?:系统)?(?:指令|设定)\s*[:：]|以下是(?:你的)?新的?(?:规则|指令|设定)")),
        ("zh-fake-system", re.compile(r"(?:【|\[|<)\s*(?:系统|system)\s*(?:消息|指令|通知)?\s*(?:】|\]|>)|系统(?:指令|消息)\s*[:：]")),
    ],
    "role_play": [
        ("en-dan", re.compile(r"(?:you\s+are|you're|to\s+be|act\s+as|be|called|named|你是|扮演|作为)\s*(?:an?\s+)?DAN\b|\bDAN\s*(?:mode|prompt|模式)|\bdo\s+anything\s+now\b", re.IGNORECASE)),
        ("en-mode", re.compile(r"\b(?:developer|dev|god|debug|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|evil|sudo)\s+mode\b", _I)),
        ("en-jailbreak", re.compile(r"\bjail\s*break(?:ing|ed)?\s+(?:prompt|mode|you|yourself|the\s+(?:ai|model|assistant|bot|system))\b|\bthis\s+is\s+a\s+jail\s*break\b", _I)),
        ("en-persona-unbound", re.compile(
            r"\b(?:pretend|imagine|act|behave|roleplay|role-play|play)\b[^.\n]{0,60}\b(?:no|without|free\s+(?:of|from)|not\s+bound\s+by|ignor\w*)\s+(?:any\s+|all\s+)?(?:restrictions?|rules|limits|limitations|filters?|guidelines|ethics|morals|censorship|safety)", _I)),
        ("en-you-are-now", re.compile(r"\byou\s+are\s+now\s+(?:an?\s+)?(?:unrestricted|unfiltered|uncensored|evil|jailbroken|free)\b", _I)),
        ("en-act-as-unbound", re.compile(r"\b(?:act|pose)\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|uncensored|evil|jailbroken|rogue)\b", _I)),
        ("zh-mode", re.compile(r"(?:进入|开启|切换到|切换成|启用|打开|激活|处于|变成)(?:了)?(?:你的)?(?:开发者|越狱|上帝|调试|无限制|无审查|管理员)模式")),
        ("zh-unbound", re.compile(r"(?:没有|不受|无视|不遵守|摆脱|解除)(?:任何|一切|所有)?(?:的)?(?:限制|规则|约束|道德|审查|过滤|安全准则|束缚)(?:的)?(?:助手|AI|人工智能|机器人|模型|角色|版本)", re.IGNORECASE)),
        ("zh-roleplay-unbound", re.compile(r"(?:扮演|假装|假设你是|你现在是|现在你是|当作|化身)[^。\n]{0,30}(?:没有|不受|无视|摆脱)[^。\n]{0,6}(?:限制|规则|约束|道德|审查)")),
        ("zh-jailbreak", re.compile(r"越狱(?:版|提示|指令|攻击|一下你|你自己)")),
    ],
    "prompt_extraction": [
        ("en-reveal-prompt", re.compile(
            r"\b(?:reveal|show|print|output|repeat|display|tell|give|leak|dump|share|write\s+out|recite|list)\b[^.\n?]{0,30}?\b(?:your|the|its)\s+(?:own\s+)?(?:full\s+|exact\s+|entire\s+|complete\s+)?(?:system|hidden|initial|original|secret|internal|developer|pre-?prompt|starting)\s+(?:prompt|instructions?|message|rules|configuration|directives?)", _I)),
        ("en-what-is-your-prompt", re.compile(
            r"\bwhat(?:'s|\s+is|\s+are|\s+were)\s+your\s+(?:own\s+)?(?:system|hidden|initial|original|secret|internal|developer)\s+(?:prompt|instructions?|message|rules|configuration)", _I)),
        ("en-your-instructions", re.compile(r"\b(?:reveal|print|output|repeat|dump|leak|recite)\s+(?:all\s+)?(?:of\s+)?your\s+(?:instructions|prompt|rules|guidelines)\b", _I)),
        ("en-repeat-above", re.compile(r"\b(?:repeat|print|output|copy)\s+(?:everything|all|the\s+(?:text|words|content|lines))\s+(?:above|before|preceding|prior)\b", _I)),
        ("en-verbatim", re.compile(r"\b(?:prompt|instructions)\b[^.\n]{0,20}\bverbatim\b|\bverbatim\b[^.\n]{0,30}\b(?:prompt|instructions)\b", _I)),
        ("zh-reveal", re.compile(rf"{_REVEAL_ZH}[^。\n]{{0,12}}{_SECRET_ZH}")),
        ("zh-what-is-your", re.compile(rf"你的{_SECRET_ZH.replace('你的提示词|你的设定|你的指令|', '')}是什么|你(?:的)?(?:系统提示词|提示词|系统指令|初始指令)(?:是什么|写了什么|里有什么|内容)|(?:提示词|系统提示|指令)(?:原文|全文|逐字)")),
        ("zh-ba-secret", re.compile(rf"把(?:你的|您的)?{_SECRET_ZH}[^。\n]{{0,12}}(?:发|给|告诉|输出|打印|贴|写|列|念|复述|重复)")),
        ("zh-ba-above", re.compile(r"把(?:你)?(?:上面|以上|之前|前面)(?:的)?(?:所有|全部)?(?:内容|文字|话)[^。\n]{0,4}(?:重复|复述|输出|打印|原样)")),
        ("zh-repeat-above", re.compile(r"(?:重复|复述|输出|打印)(?:一遍)?(?:你)?(?:上面|以上|之前|前面)(?:的)?(?:所有|全部)?(?:内容|文字|话)")),
    ],
    "encoded_smuggling": [
        ("decode-and-run-en", re.compile(r"\b(?:decode|decrypt|base64-?decode|unhex|deobfuscate|translate\s+from\s+(?:base64|hex|rot13))\b[^.\n]{0,60}\b(?:and|then)\s+(?:follow|execute|run|obey|do|perform|act\s+on|carry\s+out)", _I)),
        ("decode-and-run-zh", re.compile(r"(?:解码|解密|翻译|还原|转换)[^。\n]{0,40}(?:并|然后|再|后)(?:且)?(?:执行|运行|照做|遵循|遵守|按照|照着|去做|完成)")),
        ("invisible-characters", re.compile(r"[\U000E0000-\U000E007F\u202A-\u202E\u2066-\u2069]")),
    ],
    "privilege_escalation": [
        ("en-as-admin", re.compile(r"\bas\s+(?:an?\s+|the\s+)?(?:admin|administrator|root|superuser|super\s+user|sysadmin|operator|developer\s+of\s+this\s+system)\b[^.\n]{0,40}\b(?:call|run|execute|access|read|grant|give|show|delete|dump|list|open)\b", _I)),
        ("en-grant-me", re.compile(r"\b(?:grant|give|elevate|escalate)\s+(?:me|my\s+account|my\s+privileges?|privileges?)\b[^.\n]{0,30}\b(?:admin|root|superuser|full|elevated|higher|unrestricted)\b", _I)),
        ("en-bypass-approval", re.compile(
            r"\b(?:run|execute|call|invoke)\b[^.\n]{0,40}\b(?:without|bypassing|skipping)\s+(?:the\s+|any\s+)?(?:human\s+)?(?:approval|authori[sz]ation|sandbox|confirmation)"
            r"|\b(?:bypass|skip|circumvent)\s+(?:the\s+|your\s+|any\s+)?(?:human\s+)?(?:approval|sandbox|guardrails?|safety\s+checks?|permission\s+checks?|filters?)\b[^.\n]{0,30}\b(?:and|then|to)\s+(?:run|execute|call|show|give|answer|do)\b"
            r"|\b(?:disable|turn\s+off|switch\s+off)\s+(?:the\s+|your\s+)?(?:guardrails?|safety\s+checks?|sandbox|filters?|content\s+filter)", _I)),
        ("en-secrets", re.compile(r"\b(?:print|show|reveal|dump|read|list|output|cat|leak|give\s+me)\b[^.\n]{0,30}\b(?:os\.environ|environment\s+variables|env\s+vars|/etc/(?:passwd|shadow)|api[\s_-]?keys?|secret\s+keys?|access\s+tokens?|credentials|passwords?\s+(?:of|for)\s+(?:the\s+)?(?:server|system|database|admin))", _I)),
        ("en-other-tenants", re.compile(r"\b(?:other|another|all)\s+(?:users?|tenants?|customers?)['’]?s?\s+(?:data|records|conversations|chats|questions|documents|sessions|history)\b[^.\n]{0,30}|\b(?:show|give|list|read|access|dump)\b[^.\n]{0,20}\b(?:other|another|all)\s+(?:users?|tenants?)['’]?s?\b", _I)),
        ("paths", re.compile(r"/etc/(?:passwd|shadow|sudoers)|~/\.ssh|id_rsa\b|\.env\b\s*(?:file|文件)?", _I)),
        ("zh-as-admin", re.compile(r"(?:以|用|作为)(?:管理员|超级用户|超级管理员|root|系统|开发者|运维)(?:的)?(?:身份|权限|账号|模式)?[^。\n]{0,12}(?:调用|执行|运行|读取|访问|查看|打开|删除|导出|获取)", _I)),
        ("zh-grant", re.compile(r"(?:授予|给|赋予|提升)(?:我|我的账号)[^。\n]{0,6}(?:管理员|root|最高|超级|全部|所有)(?:的)?权限", _I)),
        ("zh-bypass", re.compile(r"(?:绕过|跳过|无需|不经|不用)[^。\n]{0,4}(?:人工)?(?:审批|审核|批准|权限检查|权限校验|安全检查|鉴权|认证)[，,\s]*(?:直接|马上|立刻|就)?(?:运行|执行|调用|读取|访问|打开|删除|给我|输出)"
                            r"|(?:关闭|禁用|绕过|去掉)(?:你的)?(?:沙箱|护栏|过滤器?|安全检查|内容审查)")),
        ("zh-secrets", re.compile(r"(?:输出|打印|显示|告诉我|读取|列出|泄露|给我)[^。\n]{0,12}(?:环境变量|密钥|API\s*key|api_key|令牌|token|密码文件|服务器密码|数据库密码|凭据)", _I)),
        ("zh-other-tenants", re.compile(r"(?:其他|别的|所有)(?:用户|租户|客户|人)(?:的)?(?:数据|记录|对话|问题|文档|会话|聊天记录|历史)")),
    ],
}
"""Rule name and pattern per category, checked in ``CATEGORIES`` order."""

_INVISIBLE = re.compile(r"[\u200B-\u200F\u2060-\u2064\uFEFF\u00AD\u034F\u180E]")
_CONFUSABLES = str.maketrans({
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d",
    "ɡ": "g", "ո": "n", "ց": "g", "Α": "A", "Β": "B", "Ε": "E", "Ι": "I", "Ο": "O", "Ρ": "P", "Τ": "T", "Χ": "X",
    "ο": "o", "α": "a", "ε": "e", "ι": "i", "ν": "v", "κ": "k", "А": "A", "Е": "E", "О": "O", "Р": "P", "С": "C",
    "Н": "H", "Т": "T", "М": "M", "К": "K", "Х": "X", "І": "I"})
_SPACED = re.compile(r"\b(?:[A-Za-z][\s.\-_*]){4,}[A-Za-z]\b")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX = re.compile(r"(?:(?:\\x|0x)?[0-9a-fA-F]{2}[\s:,]?){8,}")
_UESC = re.compile(r"(?:\\u[0-9a-fA-F]{4}){4,}")
_FULLWIDTH = re.compile(r"[\uFF21-\uFF3A\uFF41-\uFF5A]")
_ROT13_HINT = re.compile(r"rot-?13", re.IGNORECASE)


def normalise(text: str) -> str:
    """The text as the patterns read it: NFKC, invisible characters removed, look-alike letters
    mapped to Latin, spaced-out single letters joined."""
    out = unicodedata.normalize("NFKC", text)
    out = _INVISIBLE.sub("", out).translate(_CONFUSABLES)
    return _SPACED.sub(lambda m: re.sub(r"[\s.\-_*]", "", m.group(0)), out)


def _printable(raw: bytes) -> str | None:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    good = sum(ch.isprintable() or ch in "\n\t" for ch in decoded)
    return decoded if decoded and good / len(decoded) > 0.9 else None


def decoded_payloads(text: str) -> list[str]:
    """Texts hidden in ``text``: base64 / hex / ``\\uXXXX`` runs that decode to readable UTF-8,
    and the ROT13 reading when ROT13 is mentioned."""
    found: list[str] = []
    for m in _BASE64.finditer(text):
        run = m.group(0)
        for alt in (run, run.replace("-", "+").replace("_", "/")):
            try:
                got = _printable(base64.b64decode(alt + "=" * (-len(alt) % 4), validate=True))
            except (binascii.Error, ValueError):
                continue
            if got:
                found.append(got)
                break
    for m in _HEX.finditer(text):
        digits = re.sub(r"\\x|0x|[\s:,]", "", m.group(0))
        if len(digits) % 2 == 0 and (got := _printable(bytes.fromhex(digits))):
            found.append(got)
    for m in _UESC.finditer(text):
        found.append(m.group(0).encode().decode("unicode_escape"))
    if _ROT13_HINT.search(text):
        found.append(codecs.decode(text, "rot13"))
    return found


def _match(text: str) -> Rejection | None:
    for category in CATEGORIES:
        for rule, pattern in PATTERNS[category]:
            if pattern.search(text):
                return Rejection(category, rule)
    return None


def check(text: str) -> Rejection | None:
    """Rule G1: the rejection of ``text`` (a user's question), or None when it may go to the model.

    Checked on the raw text (invisible and bidirectional controls), its normalised form, and each
    decoded payload (a hit there is ``encoded_smuggling``). Pure; about 0.1 ms per question.
    """
    invisible = PATTERNS["encoded_smuggling"][2][1]
    if invisible.search(text):
        return Rejection("encoded_smuggling", "invisible-characters")
    plain = normalise(text)
    hit = _match(plain)
    if hit is not None:
        tricked = plain != unicodedata.normalize("NFKC", text) or _FULLWIDTH.search(text)
        if tricked and _match(text) is None:
            return Rejection("encoded_smuggling", f"obfuscated:{hit.rule}")
        return hit
    for payload in decoded_payloads(plain):
        inner = _match(normalise(payload))
        if inner is not None:
            return Rejection("encoded_smuggling", f"decoded:{inner.rule}")
    return None
