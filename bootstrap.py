#!/usr/bin/env python3
"""Install Conduit into ./.venv from the lock file, then run a command in it.

Needs only Python 3.11+. Usage:
    python3 bootstrap.py demo       # install, ingest the law corpus once, start the stack, ask a question
    python3 bootstrap.py test       # install with test tools, run the test suite
    python3 bootstrap.py up|ask|ingest ...   # any other `conduit` command
The install is skipped when .venv is up to date with uv.lock. ``demo`` also installs
bubblewrap (code_exec's isolation) when it runs as root with apt-get, and otherwise says in
one line that code execution is off and which command turns it on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
UV_VERSION = "0.13.8"


def _stamp(dev: bool) -> str:
    h = hashlib.sha256()
    for name in ("pyproject.toml", "uv.lock"):
        h.update((ROOT / name).read_bytes())
    h.update(b"dev" if dev else b"prod")
    return h.hexdigest()


def install(dev: bool) -> None:
    """Create .venv and sync it with uv.lock (frozen); a no-op when already in sync."""
    if sys.version_info < (3, 11):
        sys.exit(f"Conduit needs Python 3.11+, this is {sys.version.split()[0]}")
    stamp_file = VENV / ".conduit-install"
    want = _stamp(dev)
    if stamp_file.exists() and stamp_file.read_text() == want:
        return
    if not (BIN / "python").exists():
        print("creating .venv …", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    uv = BIN / "uv"
    if not uv.exists():
        subprocess.run([str(BIN / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        f"uv=={UV_VERSION}"], check=True)
    cmd = [str(uv), "sync", "--frozen", "--inexact", "--python", str(BIN / "python")]
    if not dev:
        cmd.append("--no-dev")
    print("installing dependencies from uv.lock …", flush=True)
    # compiled bytecode: the sandbox mounts site-packages read-only, so it cannot compile at import
    env = dict(os.environ, UV_PROJECT_ENVIRONMENT=str(VENV), UV_COMPILE_BYTECODE="1")
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    stamp_file.write_text(want)


BWRAP_PATH = "/usr/bin:/bin:/usr/local/bin"
"""Where the sandbox looks for ``bwrap`` (services/sandbox/isolation.py)."""


def ensure_bubblewrap(is_root: bool | None = None, run=subprocess.run) -> str:
    """Make code_exec's isolation available for ``demo``; return what was done, and print one line of it.

    ``"present"`` when ``bwrap`` is found; ``"installed"`` after ``apt-get install -y bubblewrap``
    (an ``apt-get update`` first when the package index is stale) as root; else ``"off"`` after
    printing ``services.sandbox.isolation.off_message``: the same line the sandbox's readiness
    and the code_exec tool error give. ``run`` runs a command (``subprocess.run``'s signature).
    """
    if shutil.which("bwrap", path=BWRAP_PATH):
        print("code_exec can run: bubblewrap isolates it (the agent runs code once a model is configured)", flush=True)
        return "present"
    root = os.geteuid() == 0 if is_root is None else is_root
    if root and shutil.which("apt-get"):
        print("installing bubblewrap (the isolation of code_exec) with apt-get …", flush=True)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        install = ["apt-get", "install", "-y", "-q", "bubblewrap"]
        if run(install, **quiet).returncode == 0 or (
                run(["apt-get", "update", "-q"], **quiet).returncode == 0 and run(install, **quiet).returncode == 0):
            return "installed"
    sys.path.insert(0, str(ROOT))
    from services.sandbox.isolation import NOT_INSTALLED, off_message  # stdlib only: works before the install

    print(off_message(NOT_INSTALLED), flush=True)
    return "off"


def main(argv: list[str]) -> int:
    """Install as needed, then run ``conduit ARGS`` (or pytest for ``test``)."""
    if not argv:
        print(__doc__)
        return 2
    if argv[0] == "test":
        install(dev=True)
        return subprocess.call([str(BIN / "python"), "-m", "pytest", *argv[1:]], cwd=ROOT)
    install(dev=False)
    if argv[0] == "demo":
        ensure_bubblewrap()
    return subprocess.call([str(BIN / "conduit"), *argv], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
