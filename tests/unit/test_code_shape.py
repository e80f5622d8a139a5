"""The code keeps its shape and stands on its own (project rules, README "How it fits together").

- No module under ``services/``, ``conduit/``, ``contracts/``, ``ops/`` or ``testkit/`` is longer than ``MODULE_MAX``
  lines and no function (or method) longer than ``FUNCTION_MAX`` lines: the rule is "about
  400 and about 60", these are its hard edges. Run this file to list the offenders.
- The code does not refer to documents outside the repository: neither ``seed`` (the
  reference documents the project started from) nor ``FIELD-NOTES`` (the machine's notes)
  occurs in it; a rule is stated with its number where it applies, its reason in
  docs/rules.md or docs/architecture.md, a measurement in docs/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("services", "conduit", "contracts", "ops", "testkit")
MODULE_MAX = 420
"""Longest module in lines (the rule says about 400)."""
FUNCTION_MAX = 70
"""Longest function or method in lines, decorators excluded (the rule says about 60)."""
OUTSIDE = re.compile(r"seed|field[- ]notes", re.IGNORECASE)
"""Names of documents that are not in the repository."""


def sources() -> list[Path]:
    """Every Python file of ``PACKAGES``, sorted."""
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def too_long() -> list[str]:
    """``path: N lines`` for each long module and ``path:line name: N lines`` for each long function."""
    found = []
    for path in sources():
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        lines = text.count("\n")
        if lines > MODULE_MAX:
            found.append(f"{rel}: {lines} lines (module, > {MODULE_MAX})")
        for node in ast.walk(ast.parse(text, filename=str(rel))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_MAX:
                    found.append(f"{rel}:{node.lineno} {node.name}: {length} lines (function, > {FUNCTION_MAX})")
    return found


def outside_mentions() -> list[str]:
    """``path:line: text`` for each line of code that names a document outside the repository."""
    return [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
            for p in sources() for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if OUTSIDE.search(line)]


def test_modules_and_functions_stay_short():
    offenders = too_long()
    assert not offenders, "split these by concern:\n" + "\n".join(offenders)


def test_code_does_not_refer_to_documents_outside_the_repository():
    mentions = outside_mentions()
    assert not mentions, ("state the rule and its number here and its reason in docs/rules.md:\n"
                          + "\n".join(mentions))


if __name__ == "__main__":
    print("\n".join(too_long() + outside_mentions()) or "all short, no references outside the repository")
