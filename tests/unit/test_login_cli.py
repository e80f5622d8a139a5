"""`conduit login` prints a fresh one-time link for the running stack; with none it says how to
start one and exits 1 (the link case runs in tests/stack/test_embedded_up.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_login_without_a_running_stack_says_how_to_start_one(tmp_path: Path) -> None:
    env = {**os.environ, "CONDUIT_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "conduit", "login"], env=env, capture_output=True, text=True, timeout=60)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1 and "no running stack" in said and "conduit up" in said, said
    assert "#login=" not in done.stdout
