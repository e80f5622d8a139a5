"""The README and docs stay true.

- The README's settings table is generated from Settings.
- The README's first two commands are the two that matter, and .ci/run runs the test one.
- Every repository path (``services/gateway/app.py``, ``docs/rules.md``), module (``ops.client.stream_task``,
  ``python -m conduit.runtime.settings``) and relative link the README, ``docs/*.md`` and the build and
  deployment files name exists: a path with an attribute after it (``conduit/records/memory.recall_marks``)
  needs its module, a module with attributes its longest module prefix; bench output under ``.data`` is
  generated, not kept.
"""

from __future__ import annotations

import re
from pathlib import Path

from conduit.runtime.settings import settings_table

ROOT = Path(__file__).resolve().parents[2]
TOP = r"(?:\.ci|\.github|bench|conduit|contracts|docs|evals|examples|k8s|ops|services|testkit|tests)"
PATH = re.compile(r"(?<![\w./-])(" + TOP + r"/[\w./-]*[\w/])")
"""A repository path: one of the top-level folders, then a path (an end ``.`` or ``/`` is punctuation)."""
MODULE = re.compile(r"(?<![\w./-])((?:ops|testkit|services|contracts|conduit\.(?:runtime|records|policy))\.[a-z_][\w.]*\w)")
"""A dotted name in one of our packages (``conduit.questions`` and the like are topics, not modules)."""
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
"""A Markdown link's target, relative to the file that has it."""


def named_files() -> list[Path]:
    """The README, every doc, and the build and deployment files that name paths in comments."""
    return ([ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Dockerfile", ROOT / "docker-compose.yml",
             ROOT / ".ci" / "run"] + sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "k8s").rglob("*.yaml")))


def path_exists(path: str) -> bool:
    """``path`` exists in the repository, or is ``module.attribute`` of a module that does."""
    if "/.data" in path or (ROOT / path).exists():
        return True
    head, _, last = path.rpartition("/")
    return "." in last and (ROOT / head / (last.split(".")[0] + ".py")).exists()


def module_exists(name: str) -> bool:
    """The dotted ``name`` is a package or module of the repository, followed by nothing or attributes."""
    here = ROOT
    for part in name.split("."):
        if (here / part).is_dir():
            here = here / part
            continue
        return (here / f"{part}.py").exists()
    return True


def missing() -> list[str]:
    """``file:line: what`` for each path, module or link named that is not in the repository."""
    out = []
    for f in named_files():
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{f.relative_to(ROOT)}:{i}"
            out += [f"{where}: {m}" for m in PATH.findall(line) if not path_exists(m)]
            out += [f"{where}: {m}" for m in MODULE.findall(line) if not module_exists(m)]
            out += [f"{where}: link {m}" for m in LINK.findall(line)
                    if "://" not in m and not m.startswith("mailto:") and not (f.parent / m).exists()]
    return out


def test_readme_settings_table_is_current():
    assert settings_table() in (ROOT / "README.md").read_text(encoding="utf-8"), (
        "README settings table is stale: regenerate it with "
        "`.venv/bin/python -m conduit.runtime.settings` and paste it into README.md"
    )


def test_readme_starts_with_the_two_commands_and_ci_calls_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line.split("#")[0].strip() for block in re.findall(r"```bash\n(.*?)```", readme, re.S)
                for line in block.splitlines() if line.strip()]
    assert commands[:2] == ["python3 bootstrap.py demo", "python3 bootstrap.py test"], commands[:2]
    assert "python3 bootstrap.py test" in (ROOT / ".ci" / "run").read_text()


def test_every_path_the_docs_name_exists():
    gone = missing()
    assert not gone, "named but not in the repository (moved? fix the text):\n" + "\n".join(gone)
