"""Conduit's A2A agent card (``GET /.well-known/agent-card.json``, public: it is how other agents find Conduit).

The card names one JSON-RPC endpoint, ``{base}/v1/a2a``, twice: protocol 1.0 (``SendMessage``,
``SendStreamingMessage``, ``GetTask``, ``CancelTask``, ``SubscribeToTask``) and 0.3 (``message/send``,
``message/stream``, ``tasks/get``, ``tasks/cancel``, ``tasks/resubscribe``); the ``a2a-sdk``'s dispatcher serves
both. Skills: law and tax questions, questions on the tenant's own documents, and code execution when a
sandbox can isolate code (``conduit.runtime.toolcatalog``, rule T2). Security: the bearer credential every
``/v1`` route takes (``services.gateway.identity.auth``): an API key (``cdk_...``) and, with
``CONDUIT_AUTH=jwt``, a JWT.
"""

from __future__ import annotations

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

from conduit.runtime.settings import IdentitySettings
from services.gateway.agents.a2a_paths import PATH

SKILLS = (
    AgentSkill(id="law_tax_qa", name="Chinese law and tax questions",
               description="Answers questions on Chinese law and tax from the current law database, citing the "
                           "articles it relies on (numbered sources as data parts of the answer artifact).",
               tags=["law", "tax", "qa", "citations"],
               examples=["小规模纳税人适用简易计税方法的征收率是多少？", "劳动合同试用期最长多久？"]),
    AgentSkill(id="document_qa", name="Questions on your documents",
               description="Answers from the documents your tenant uploaded (POST /v1/documents), with citations.",
               tags=["documents", "rag", "qa"], examples=["一线城市出差住宿费每晚最多报销多少？"]),
)
CODE_SKILL = AgentSkill(id="code_execution", name="Calculations in a sandbox",
                        description="Runs Python in an isolated sandbox for calculations and tables; each run "
                                    "waits for the caller's approval (state input-required).",
                        tags=["code", "calculation"], examples=["按3%征收率，含税销售额103万元的增值税是多少？"])


def security(identity: IdentitySettings) -> tuple[dict[str, SecurityScheme], list[SecurityRequirement]]:
    """The card's ``security_schemes`` and ``security_requirements`` for ``identity.auth``."""
    key = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="Bearer", bearer_format="API key (cdk_...)",
        description="A Conduit API key (conduit keys create) as Authorization: Bearer <key>"))
    schemes = {"apiKey": key}
    if identity.auth == "jwt":
        schemes["jwt"] = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer", bearer_format="JWT",
            description=f"A JWT with the claims {identity.auth_jwt_tenant_claim!r} and {identity.auth_jwt_user_claim!r}"))
    requirements = []
    for name in schemes:  # either scheme alone satisfies the card (a list of alternatives)
        req = SecurityRequirement()
        req.schemes[name].SetInParent()
        requirements.append(req)
    return schemes, requirements


def agent_card(identity: IdentitySettings, base_url: str, code_execution: bool) -> AgentCard:
    """The card for a gateway reached at ``base_url`` (scheme and host, no trailing slash)."""
    url = base_url.rstrip("/") + PATH
    schemes, requirements = security(identity)
    card = AgentCard(
        name="Conduit",
        description="Event-driven agentic question answering: law, tax and your own documents, every claim cited.",
        version="1",
        provider=AgentProvider(organization="Conduit", url=base_url.rstrip("/")),
        documentation_url=base_url.rstrip("/") + "/docs",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC.value, protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC.value, protocol_version=PROTOCOL_VERSION_0_3),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),  # rule T12
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[*SKILLS, *([CODE_SKILL] if code_execution else [])],
        security_requirements=requirements,
    )
    for name, scheme in schemes.items():
        card.security_schemes[name].CopyFrom(scheme)
    return card
