"""`conduit login` prints a fresh one-time link for the running stack; with none it says how to
start one and exits 1 (the link case, through the installed ``conduit`` script, runs in
tests/stack/test_embedded_up.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from conduit.runtime.settings import get_settings
from ops.cli import app


def test_login_without_a_running_stack_says_how_to_start_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUIT_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()  # the CLI reads its settings once per process
    try:
        done = CliRunner().invoke(app, ["login"], env={"COLUMNS": "200"})
    finally:
        get_settings.cache_clear()
    said = " ".join(done.output.split())
    assert done.exit_code == 1 and "no running stack" in said and "conduit up" in said, said
    assert "#login=" not in said
