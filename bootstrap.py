#!/usr/bin/env python3
"""Install Conduit into ./.venv from the lock file, then run a command in it.

Needs only Python 3.11+. Usage:
    python3 bootstrap.py demo       # install, ingest the law corpus once, start the stack, ask a question
    python3 bootstrap.py test       # install with test tools, run the test suite
    python3 bootstrap.py up|ask|ingest ...   # any other `conduit` command
The install is skipped when .venv is up to date with uv.lock. ``demo`` also installs
bubblewrap (code_exec's isolation) when it runs as root with apt-get, and otherwise says in
one line that code execution is off and which command turns it on. ``test`` does the same for
bubblewrap and for the programs some tests need (``TEST_TOOLS``: Chromium for the page's browser tests, Prometheus' promtool and
server for the alert tests), and otherwise prints one line naming the tests that skip and the command.
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


def _apt_install(package: str, run) -> bool:
    """``apt-get install -y PACKAGE``, with an ``apt-get update`` and a second try when the first fails
    (a stale package index); True when installed. ``run``: ``subprocess.run``'s signature."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    install = ["apt-get", "install", "-y", "-q", package]
    return run(install, **quiet).returncode == 0 or (
        run(["apt-get", "update", "-q"], **quiet).returncode == 0 and run(install, **quiet).returncode == 0)


TEST_TOOLS = (
    ("/usr/bin/chromium", "chromium", "the page's browser tests",
     ("tests/stack/test_page.py", "tests/stack/test_page_tools.py")),
    ("/usr/bin/promtool", "prometheus", "the alert rules' tests and the real-Prometheus stack test",
     ("tests/deploy/test_alert_rules.py", "tests/stack/test_prometheus.py")),
)
"""``(program, Debian package, what needs it, its test files)``: what ``test`` installs or names as skipped."""


def _selected(files: tuple[str, ...], args: list[str]) -> bool:
    """True when pytest ``args`` run any of ``files``: no path given (the whole suite) or a path that is,
    or holds, one of them."""
    paths = [os.path.normpath(a.split("::")[0]) for a in args
             if not a.startswith("-") and (ROOT / a.split("::")[0]).exists()]
    return not paths or any(p == "." or f == p or f.startswith(p + "/") for p in paths for f in files)


def ensure_test_tools(args: list[str], is_root: bool | None = None, run=subprocess.run,
                      exists=os.path.exists) -> dict[str, str]:
    """Before ``test``: for each of ``TEST_TOOLS`` whose tests ``args`` select and whose program is missing,
    install its package as root with apt-get, else print one line naming the tests that will skip and the
    command that turns them on. Returns ``{package: "present" | "installed" | "skipped"}`` for those selected."""
    root = os.geteuid() == 0 if is_root is None else is_root
    done = {}
    for program, package, what, files in TEST_TOOLS:
        if not _selected(files, args):
            continue
        if exists(program):
            done[package] = "present"
            continue
        if root and shutil.which("apt-get"):
            print(f"installing {package} ({what}) with apt-get …", flush=True)
            if _apt_install(package, run):
                done[package] = "installed"
                continue
        print(f"skipping {what} ({', '.join(files)}): Debian's {package} is not installed; "
              f"turn them on with: sudo apt-get install -y {package}", flush=True)
        done[package] = "skipped"
    return done


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
        if _apt_install("bubblewrap", run):
            return "installed"
    sys.path.insert(0, str(ROOT))
    from services.sandbox.isolation import NOT_INSTALLED, off_message  # stdlib only: works before the install

    print(off_message(NOT_INSTALLED), flush=True)
    return "off"


def main(argv: list[str]) -> int:
    """Install as needed, then run ``conduit ARGS`` (or pytest for ``test``)."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)  # this script's own help, without installing anything
        return 0 if argv else 2
    if argv[0] == "test":
        install(dev=True)
        ensure_bubblewrap()  # the sandbox's tests run code in it, as the demo's answers do
        ensure_test_tools(argv[1:])
        return subprocess.call([str(BIN / "python"), "-m", "pytest", *argv[1:]], cwd=ROOT)
    install(dev=False)
    if argv[0] == "demo":
        ensure_bubblewrap()
    return subprocess.call([str(BIN / "conduit"), *argv], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
