"""The layers stay as drawn (docs/architecture.md, "Layers"): import-linter's contracts in pyproject.toml.

    testkit/     test support (scripted model, stack helpers): imported by tests and benches only
    ops/         entry points: CLI, embedded stack and supervisor, evals, probe, doctor, client
    services/    the services, none importing another
    conduit/     shared runtime: runtime > records | policy
    contracts/   the messages and API shapes

An arrow may only point down; no import cycle, neither among a package's modules nor among its
subpackages (``acyclic_siblings``). ``lint-imports`` from the repository root runs the same contracts and
names the offending import. The second test plants one violation of each kind in a small copy of the
tree and checks that every contract breaks, so a contract that silently matches nothing fails here too.
"""

from __future__ import annotations

import json
import re
import tempfile
import tomllib
from pathlib import Path

import pytest
from fresh import Started

ROOT = Path(__file__).resolve().parents[2]
LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(no_cache=True, no_logo=True, verbose=False))")
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def lint(cwd: Path) -> Started:
    """Start every contract of ``cwd/pyproject.toml`` in a fresh interpreter (its packages come from ``cwd``);
    ``outcome(started)`` gives ``(exit status, output)``, 0 when all are kept."""
    return Started(LINT, cwd, timeout_s=60)


def outcome(started: Started) -> tuple[int, str]:
    done = started.result()
    return done.returncode, done.stdout + done.stderr


def kept(output: str) -> dict[str, bool]:
    """``{contract name: kept}`` from the summary lines of ``lint-imports``."""
    names = {c["name"] for c in CONTRACTS["contracts"]}
    found = {}
    for line in output.splitlines():
        m = re.match(r"^(.*) (KEPT|BROKEN)\b", line.strip())
        if m and m.group(1) in names:
            found[m.group(1)] = m.group(2) == "KEPT"
    return found


REAL = lint(ROOT)
"""Started at collection (``tests/unit/fresh.py``), as are the small trees' runs below."""


def test_the_import_contracts_are_kept():
    status, output = outcome(REAL)
    assert status == 0, "an import crosses a layer or closes a cycle (run `lint-imports`):\n" + output
    assert kept(output) == {c["name"]: True for c in CONTRACTS["contracts"]}, output


TREE = {
    "testkit/__init__.py": "",
    "ops/__init__.py": "",
    "ops/cli.py": "import services.gateway.app\n",
    "ops/entry.py": "import ops.cli\n",
    "services/__init__.py": "",
    "services/gateway/__init__.py": "",
    "services/gateway/app.py": "import conduit.runtime.bus\n",
    "services/web/__init__.py": "",
    "services/web/main.py": "import contracts.topics\n",
    "conduit/__init__.py": "",
    "conduit/__main__.py": "import ops.entry\n",
    "conduit/runtime/__init__.py": "",
    "conduit/runtime/bus.py": "import conduit.records.keys\n",
    "conduit/records/__init__.py": "",
    "conduit/records/keys.py": "import contracts.topics\n",
    "conduit/policy/__init__.py": "",
    "conduit/policy/breaker.py": "",
    "contracts/__init__.py": "",
    "contracts/topics.py": "",
}
"""A small tree with the real layout and only allowed arrows."""

VIOLATIONS = {
    "conduit/runtime/bus.py": "import services.gateway.app\n",  # up: shared runtime -> a service
    "services/web/main.py": "import services.gateway.app\nimport testkit\n",  # a service -> another, -> test support
    "conduit/records/keys.py": "import conduit.runtime.bus\n",  # records above the runtime (and a cycle)
    "services/gateway/app.py": "import services.gateway.routes\n",  # a cycle between two modules
    "services/gateway/routes.py": "import services.gateway.app\n",
}
"""One planted violation of each contract."""


def write(root: Path, files: dict[str, str]) -> None:
    """Write ``files`` (path: text) under ``root`` and a pyproject.toml with the real contracts."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    lines = ["[tool.importlinter]", f"root_packages = {json.dumps(CONTRACTS['root_packages'])}"]
    for contract in CONTRACTS["contracts"]:
        lines += ["", "[[tool.importlinter.contracts]]"] + [f"{k} = {json.dumps(v)}" for k, v in contract.items()]
    (root / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


_TREES = {planted: tempfile.TemporaryDirectory(prefix="conduit-layers-") for planted in (False, True)}
for _planted, _tree in _TREES.items():
    write(Path(_tree.name), TREE | (VIOLATIONS if _planted else {}))
PLANTED = {planted: lint(Path(tree.name)) for planted, tree in _TREES.items()}


@pytest.mark.parametrize("planted", [False, True], ids=["allowed arrows", "one violation of each"])
def test_every_contract_breaks_on_its_violation(planted: bool):
    status, output = outcome(PLANTED[planted])
    assert (status != 0) == planted, output
    assert kept(output) == {c["name"]: not planted for c in CONTRACTS["contracts"]}, output
