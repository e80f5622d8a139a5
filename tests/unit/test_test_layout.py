"""The test suite's layout (issue 39): one command runs every folder, so no two test modules may share a
basename (pytest's default import mode imports each folder's ``test_x.py`` as the top-level module ``test_x``,
and a second one fails the whole collection with "import file mismatch"), and the fast unit tests run first."""

from __future__ import annotations

import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_basename():
    seen: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name.startswith("test_") or path.name == "conftest.py":
            seen[path.name].append(str(path.relative_to(ROOT)))
    shared = {name: where for name, where in seen.items() if len(where) > 1 and name != "conftest.py"}
    assert not shared, ("test modules with one basename in two folders (give the unit one a `_rules` or "
                        f"similar suffix): {shared}")


def test_the_one_command_collects_every_folder_unit_tests_first():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    folders = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert sorted(Path(p).name for p in options["testpaths"]) == folders, options["testpaths"]
    assert options["testpaths"][0] == "tests/unit", options["testpaths"]


def test_ci_runs_the_readme_test_command_once_and_as_written():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
             if "bootstrap.py" in line and not line.strip().startswith("#")]
    assert lines == ["exec python3 bootstrap.py test"], lines
