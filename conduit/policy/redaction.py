"""Secret redaction (rule O3, docs/agent-rules.md): API keys, tokens, passwords and private keys
are replaced by ``[REDACTED]`` in answers, in tool output shown to clients and in logs.

``redact(text)`` is pure and idempotent. What it recognises: well-known key shapes (OpenAI
``sk-…``, AWS ``AKIA…``, GitHub ``ghp_…``/``github_pat_…``, Slack ``xox?-…``, Google ``AIza…``),
JWTs, ``Bearer`` tokens, PEM private-key blocks, and the value after ``password=`` / ``api_key:`` /
``密码：`` / ``token=`` style labels (the label is kept).
"""

from __future__ import annotations

import re

MARK = "[REDACTED]"

_SHAPES = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----"
    r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{30,}\b"
    r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|\bAIza[0-9A-Za-z_\-]{35}\b"
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|(?<=Bearer )[A-Za-z0-9._~+/\-]{16,}=*",
    re.DOTALL)
_LABELLED = re.compile(
    r"(?P<label>\b(?:password|passwd|pwd|passphrase|secret(?:[_ -]?key)?|api[_ -]?key|access[_ -]?key(?:[_ -]?id)?|"
    r"auth[_ -]?token|access[_ -]?token|refresh[_ -]?token|token|client[_ -]?secret)|密码|口令|密钥|令牌)"
    r"(?P<sep>\s*[\"']?\s*(?:[:=：]|is|是|为)\s*[\"']?)(?P<value>[^\s\"'，。,;；]{4,})",
    re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED]``."""
    if not text:
        return text
    out = _SHAPES.sub(MARK, text)
    return _LABELLED.sub(lambda m: m.group(0) if m.group("value") == MARK
                         else f"{m.group('label')}{m.group('sep')}{MARK}", out)
