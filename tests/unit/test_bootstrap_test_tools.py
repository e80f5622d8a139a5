"""`bootstrap.py test` and the programs some tests need (Chromium, Prometheus): installed as root with apt-get,
else one line per missing program naming the tests that skip and the command that turns them on.

The commands are recorded instead of run (installing packages from a test would change the machine) and
the programs' presence is passed in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_bootstrap_bubblewrap import Commands, bootstrap  # the recorded commands; bootstrap.py

ROOT = Path(__file__).resolve().parents[2]


def missing(_path: str) -> bool:
    return False


def test_the_whole_suite_without_root_names_each_skipped_group_and_its_command(capsys):
    run = Commands()
    assert bootstrap.ensure_test_tools([], is_root=False, run=run, exists=missing) == {
        "chromium": "skipped", "prometheus": "skipped"}
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and run.seen == []
    assert "tests/stack/test_page.py" in lines[0] and lines[0].endswith("sudo apt-get install -y chromium")
    assert "tests/deploy/test_alert_rules.py" in lines[1] and lines[1].endswith("sudo apt-get install -y prometheus")
    for _, _, _, files in bootstrap.TEST_TOOLS:
        assert all((ROOT / f).is_file() for f in files)


@pytest.mark.skipif(not bootstrap.shutil.which("apt-get"), reason="no apt-get on this machine")
def test_as_root_it_installs_what_is_missing(capsys):
    run = Commands(100, 0, 0, 0)  # chromium: stale index, update, install again; prometheus at once
    assert bootstrap.ensure_test_tools(["tests", "-q"], is_root=True, run=run, exists=missing) == {
        "chromium": "installed", "prometheus": "installed"}
    assert run.seen == [["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "update", "-q"],
                        ["apt-get", "install", "-y", "-q", "chromium"], ["apt-get", "install", "-y", "-q", "prometheus"]]
    assert "skipping" not in capsys.readouterr().out


def test_only_the_tests_selected_count_and_present_programs_change_nothing(capsys):
    run = Commands()
    assert bootstrap.ensure_test_tools(["tests/deploy", "-x"], is_root=True, run=run, exists=missing) == {
        "prometheus": "skipped" if not bootstrap.shutil.which("apt-get") else "installed"}
    assert bootstrap.ensure_test_tools(["tests/stack/test_page.py::test_x"], is_root=False, run=run,
                                       exists=lambda _p: True) == {"chromium": "present"}
    assert bootstrap.ensure_test_tools(["tests/unit"], is_root=False, run=run, exists=missing) == {}
    assert [c[-1] for c in run.seen] == (["prometheus"] if bootstrap.shutil.which("apt-get") else [])
