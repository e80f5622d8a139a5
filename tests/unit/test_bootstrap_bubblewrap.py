"""`bootstrap.py demo` and bubblewrap: installed as root with apt-get, else one clear line.

The decision is tested with the commands recorded instead of run (installing packages from a
test would change the machine); ``bwrap`` is hidden by an empty search path.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import bootstrap  # noqa: E402

from services.sandbox import isolation  # noqa: E402


class Commands:
    def __init__(self, *codes: int) -> None:
        self.codes, self.seen = list(codes), []

    def __call__(self, cmd, **_kw):
        self.seen.append(cmd)
        return subprocess.CompletedProcess(cmd, self.codes.pop(0) if self.codes else 0)


@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    monkeypatch.setattr(bootstrap, "BWRAP_PATH", str(tmp_path))


def test_without_root_it_prints_one_line_with_the_exact_command(no_bwrap, capsys):
    run = Commands()
    assert bootstrap.ensure_bubblewrap(is_root=False, run=run) == "off"
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [isolation.off_message(isolation.NOT_INSTALLED)]
    assert "code execution is off" in out[0] and isolation.enable_command() in out[0] and run.seen == []


@pytest.mark.skipif(not bootstrap.shutil.which("apt-get"), reason="no apt-get on this machine")
def test_as_root_with_apt_it_installs_bubblewrap_updating_the_index_when_needed(no_bwrap, capsys):
    run = Commands(100, 0, 0)  # the first install fails (stale index), update, install again
    assert bootstrap.ensure_bubblewrap(is_root=True, run=run) == "installed"
    assert run.seen == [["apt-get", "install", "-y", "-q", "bubblewrap"], ["apt-get", "update", "-q"],
                        ["apt-get", "install", "-y", "-q", "bubblewrap"]]
    failed = Commands(100, 100)
    assert bootstrap.ensure_bubblewrap(is_root=True, run=failed) == "off"
    assert capsys.readouterr().out.strip().endswith(isolation.enable_command())


def test_present_bubblewrap_changes_nothing(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bootstrap, "BWRAP_PATH", str(tmp_path))
    assert bootstrap.ensure_bubblewrap(is_root=True, run=Commands()) == "present"
