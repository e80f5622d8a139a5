"""The pre-router (rule R1, docs/agent-rules.md): which agent answers a question, decided before
the first model call.

Rules first (pure, here): a message that is only a greeting, a thank-you or a question about
who Conduit is goes to the chit-chat agent; a message that is only arithmetic goes to the agent
with the hint to use ``code_exec``. Otherwise, when a router model is configured
(``CONDUIT_ROUTER_MODEL``; the call is ``services.orchestrator.router``), its scores decide
through ``from_scores``:

- ``domain < router_out_of_scope_below`` (0.10) → out of scope: a short polite answer saying what
  Conduit can help with (``out_of_scope_reply``), no model call;
- ``chitchat >= router_chitchat_min`` (0.8) and ``domain < router_chitchat_domain_below`` (0.2) →
  the chit-chat agent;
- ``calculation >= router_calc_min`` (0.6) → the agent, with a hint to use ``code_exec`` (never a
  forced route).

The chit-chat agent is its own agent, not a prompt variant: ``CHITCHAT_PROMPT`` (about 200
characters), at most ``CHITCHAT_MAX_TOKENS`` completion tokens, the last ``CHITCHAT_HISTORY``
messages, no tools; without a model it gives a fixed friendly reply (``fixed_reply``).

The domain is per tenant (``Domain``, setting ``tenant_domains``), default the law and tax corpus.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

CHITCHAT_MAX_TOKENS = 600
"""Completion-token cap of one chit-chat answer."""
CHITCHAT_HISTORY = 4
"""Earlier messages the chit-chat agent sees."""

Route = Literal["agent", "chitchat", "out_of_scope"]


class Domain(BaseModel):
    """A tenant's domain: ``name`` (short) and a one-paragraph ``description``, in the tenant's language."""

    name: str = "法律与财税"
    name_en: str = "law and tax"
    description: str = "中国现行法律法规与财税政策：增值税、个人所得税、企业所得税、社保、劳动合同、公司与合同等问题，以及你上传的文档。"


class RouteDecision(BaseModel):
    """What the pre-router decided: ``route``, whether to hint ``code_exec``, who decided
    (``rules`` | ``model`` | ``none``: no decision, the normal agent runs), the model's
    ``scores`` (0..1 per label), the matched ``rule``, ``latency_ms`` and a fail-open ``error``."""

    route: Route = "agent"
    calc_hint: bool = False
    source: Literal["rules", "model", "none"] = "none"
    scores: dict[str, float] = Field(default_factory=dict)
    rule: str | None = None
    latency_ms: float = 0.0
    error: str | None = None

    def trace(self) -> dict[str, Any]:
        """The ``route`` trace event's data."""
        return self.model_dump(exclude_none=True)


_END = r"[\s!！。.,，~～?？😊🙂]*$"
_RULES: list[tuple[str, Route, re.Pattern[str]]] = [
    ("greeting", "chitchat", re.compile(
        r"^\s*(?:你好|您好|嗨|哈喽|哈啰|早上好|上午好|中午好|下午好|晚上好|早安|晚安|在吗|在不在|hi|hello|hey|"
        r"good\s+(?:morning|afternoon|evening)|greetings|yo)(?:呀|啊|哦|你好|there)?" + _END, re.IGNORECASE)),
    ("thanks", "chitchat", re.compile(
        r"^\s*(?:谢谢(?:你|您)?|多谢|感谢(?:你|您)?|非常感谢|太感谢了|辛苦了|好的谢谢|thanks?(?:\s+a\s+lot|\s+you(?:\s+so\s+much)?)?|"
        r"thank\s+you(?:\s+so\s+much)?|many\s+thanks|cheers|ok(?:ay)?\s+thanks)" + _END, re.IGNORECASE)),
    ("identity", "chitchat", re.compile(
        r"^\s*(?:你是谁|你叫什么(?:名字)?|你是什么|你是(?:机器人|AI|人工智能)吗|你能做什么|你会什么|你可以做什么|你有什么功能|"
        r"介绍一下你自己|自我介绍一下|who\s+are\s+you|what\s+are\s+you|what(?:'s|\s+is)\s+your\s+name|"
        r"what\s+can\s+you\s+do|are\s+you\s+(?:a\s+)?(?:bot|robot|ai|human))" + _END, re.IGNORECASE)),
    ("arithmetic", "agent", re.compile(
        r"^\s*(?:(?:请)?(?:计算|算一下|算算|帮我算)|(?:what\s+is|what's|calculate|compute))?\s*[\d\s.,+\-*/×÷xX()（）%^=]*\d[\d\s.,+\-*/×÷xX()（）%^]*"
        r"[+\-*/×÷xX^%][\d\s.,+\-*/×÷xX()（）%^]*\d[\s)）]*(?:=|等于多少|是多少|等于几)?" + _END, re.IGNORECASE)),
]


def by_rules(question: str) -> RouteDecision | None:
    """The rules' decision for ``question`` (whole-message matches only), or None."""
    for name, route, pattern in _RULES:
        if pattern.match(question):
            return RouteDecision(route=route, calc_hint=name == "arithmetic", source="rules", rule=name)
    return None


def from_scores(scores: dict[str, float], out_below: float = 0.10, chat_min: float = 0.8,
                chat_domain_below: float = 0.2, calc_min: float = 0.6) -> RouteDecision:
    """The decision for the router model's ``scores`` (``domain``, ``chitchat``, ``calculation``,
    each 0..1; a missing one counts as unknown and never triggers its route)."""
    domain, chat, calc = scores.get("domain"), scores.get("chitchat", 0.0), scores.get("calculation", 0.0)
    route: Route = "agent"
    if domain is not None and domain < out_below and chat < chat_min:
        route = "out_of_scope"
    elif chat >= chat_min and domain is not None and domain < chat_domain_below:
        route = "chitchat"
    return RouteDecision(route=route, calc_hint=route == "agent" and calc >= calc_min, source="model", scores=scores)


def is_chinese(text: str) -> bool:
    """True when ``text`` has CJK characters (the answer's language follows the question's)."""
    return re.search(r"[\u4e00-\u9fff]", text) is not None


def chitchat_prompt(domain: Domain) -> str:
    """The chit-chat agent's system prompt (about 200 characters)."""
    return (f"你是 Conduit 的闲聊助手。用用户的语言简短友好地回应寒暄、感谢或关于你的问题，不编造事实，"
            f"不调用工具；最后一句把话题引回你能帮忙的领域：{domain.name}（{domain.description[:60]}）。"
            f"Reply briefly in the user's language.")


def chitchat_messages(domain: Domain, history: list[dict[str, Any]], question: str) -> list[dict[str, Any]]:
    """What the chit-chat agent reads: its prompt, the last ``CHITCHAT_HISTORY`` messages, the question."""
    return [{"role": "system", "content": chitchat_prompt(domain)}, *history[-CHITCHAT_HISTORY:],
            {"role": "user", "content": question}]


def fixed_reply(question: str, domain: Domain) -> str:
    """The chit-chat answer when no model is configured."""
    if is_chinese(question):
        return f"你好！我是 Conduit，可以帮你解答{domain.name}方面的问题，并给出有出处的回答。有什么想问的吗？"
    return (f"Hello! I'm Conduit. I can answer questions about {domain.name_en}, with the sources cited. "
            "What would you like to know?")


def out_of_scope_reply(question: str, domain: Domain) -> str:
    """The short polite answer to a question outside the tenant's domain."""
    if is_chinese(question):
        return f"抱歉，这个问题不在我能帮忙的范围内。我可以解答{domain.name}方面的问题：{domain.description}"
    return (f"Sorry, that is outside what I can help with. I answer questions about {domain.name_en} "
            "and the documents you have uploaded, with sources.")


CALC_HINT = "本题需要计算：请用 code_exec 计算，不要心算。This question needs a calculation: use code_exec."
"""The hint added for a calculation (a hint, never a forced route)."""


def domain_for(tenant_domains: dict[str, dict[str, str]], tenant_id: str) -> Domain:
    """The tenant's domain from the ``tenant_domains`` setting (default: law and tax)."""
    return Domain(**tenant_domains.get(tenant_id, {}))
