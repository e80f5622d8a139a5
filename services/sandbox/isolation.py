"""How code_exec is isolated: the bubblewrap command line and the start-up probe.

Rule S1 (docs/rules.md): ``bwrap --unshare-all`` (no network:
only a downed loopback exists), read-only system and interpreter, no project source,
no ``.env``, a clean environment. The sandbox sees:

- ``/usr`` read-only (plus the ``/lib``, ``/lib64``, ``/bin``, ``/sbin`` links or binds);
- the interpreter's own prefix read-only when it lives outside ``/usr`` (e.g. a pyenv build);
- the service's ``site-packages`` read-only at ``/opt/site`` (``PYTHONPATH``), so numpy imports;
- the code file read-only at ``/sandbox/main.py``;
- a fresh ``/tmp`` tmpfs (``Limits.tmpfs_bytes``) as working directory and ``HOME``,
  a tiny ``/dev/shm``; the rest of ``/`` and ``/dev`` is remounted read-only;
- no ``/etc``, ``/root``, ``/home``, ``/sys`` or project directory at all.

Inside: uid/gid 65534, no capabilities, new pid/ipc/uts/net/user namespaces, nested user
namespaces disabled, new session (no TIOCSTI), killed with its parent. When the service runs
as root, bwrap itself is started as host uid 65534 when that works, so ``RLIMIT_NPROC``
applies (the kernel exempts host root from it) and an escape lands as ``nobody``.

``discover()`` probes candidate set-ups once (interpreter x host uid) by running a tiny
program in each; the first whose Python version matches the service's own (the
site-packages must fit the interpreter) wins. ``sandbox_status()`` reports the result.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

SANDBOX_UID = 65534
"""uid/gid inside the sandbox, and on the host when the service runs as root (``nobody``)."""
CODE_PATH = "/sandbox/main.py"
LAUNCHER_PATH = "/sandbox/launch.py"
"""``services/sandbox/launcher.py`` inside: runs the code, then hands ``OUT_DIR``'s files out on fd 3."""
LAUNCHER_SOURCE = Path(__file__).with_name("launcher.py")
OUT_DIR = "/tmp/out"
"""The output folder inside (``./out`` from the working directory): its files become artifacts."""
SITE_PATH = "/opt/site"
WORK_DIR = "/tmp"
PRLIMIT = "/usr/bin/prlimit"
PROBE_TIMEOUT_S = 15.0

THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMEXPR_NUM_THREADS": "1"}
"""Numeric libraries start one thread per core otherwise, which counts against the process limit."""


@dataclass(frozen=True)
class Plan:
    """A working sandbox set-up.

    Fields: ``bwrap`` binary path; ``python`` interpreter path (same inside and outside);
    ``prefix`` to bind read-only when the interpreter lives outside ``/usr`` (else None);
    ``site`` host site-packages bound at ``SITE_PATH`` (or None); ``run_as`` host uid
    to start bwrap as (None = the service's own uid).
    """

    bwrap: str
    python: str
    prefix: str | None
    site: str | None
    run_as: int | None

    def describe(self) -> str:
        who = f"host uid {self.run_as}" if self.run_as is not None else f"host uid {os.geteuid()}"
        return f"bubblewrap ({self.bwrap}), {self.python}, {who}"


def _root_links() -> list[str]:
    """bwrap arguments recreating ``/lib``, ``/lib64``, ``/bin``, ``/sbin`` (links on merged-/usr systems)."""
    args: list[str] = []
    for name in ("lib", "lib32", "lib64", "libx32", "bin", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def bwrap_command(plan: Plan, code_file: str, *, cpu_s: int, max_procs: int, file_bytes: int,
                  tmpfs_bytes: int, open_files: int = 256, max_files: int = 0, max_file_bytes: int = 0,
                  files_fd: int = -1) -> list[str]:
    """The full argv that runs ``code_file`` (host path) under ``plan`` with rlimits set by ``prlimit``.

    Units: ``cpu_s`` seconds (soft; SIGKILL one second later), ``file_bytes`` largest
    file written, ``tmpfs_bytes`` size of ``/tmp``; ``max_procs`` is ``RLIMIT_NPROC``.
    The interpreter runs ``launcher.py``, which runs the code and then writes up to
    ``max_files`` output files (``max_file_bytes`` in total; 0 = none) to the inherited pipe
    ``files_fd`` (-1 = none; the caller passes it with ``pass_fds``, same number inside).
    """
    args = [plan.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--hostname", "sandbox", "--cap-drop", "ALL",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--ro-bind", "/usr", "/usr", *_root_links(),
            "--proc", "/proc", "--dev", "/dev",
            "--size", "1048576", "--tmpfs", "/dev/shm",
            "--size", str(tmpfs_bytes), "--tmpfs", WORK_DIR]
    if plan.prefix:
        args += ["--ro-bind", plan.prefix, plan.prefix]
    env = {"HOME": WORK_DIR, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONIOENCODING": "utf-8", "MPLBACKEND": "Agg", "MPLCONFIGDIR": f"{WORK_DIR}/.matplotlib",
           **THREAD_ENV}
    if plan.site:
        args += ["--ro-bind", plan.site, SITE_PATH]
        env["PYTHONPATH"] = SITE_PATH
    args += ["--ro-bind", code_file, CODE_PATH, "--ro-bind", str(Path(code_file).with_name("launch.py")), LAUNCHER_PATH,
             "--remount-ro", "/dev", "--remount-ro", "/",
             "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--chdir", WORK_DIR, "--",
             PRLIMIT, f"--cpu={cpu_s}:{cpu_s + 1}", f"--nproc={max_procs}", f"--fsize={file_bytes}",
             f"--nofile={open_files}", "--core=0",
             plan.python, "-s", "-B", LAUNCHER_PATH, str(max_files), str(max_file_bytes),
             str(files_fd)]
    return args


def spawn_user(run_as: int | None) -> dict:
    """``subprocess`` keyword arguments that start the child as host uid/gid ``run_as`` (none for None)."""
    if run_as is None:
        return {}
    return {"user": run_as, "group": run_as, "extra_groups": []}


def prepare_code_dir(code: str, run_as: int | None) -> Path:
    """Write ``code`` to ``<new temp dir>/main.py`` and the launcher beside it (``launch.py``); return main.py's path.

    The directory is 0700 and the files 0400, all owned by host uid ``run_as`` when set
    (bwrap started as that uid must be able to bind the files; the project folder may be closed to it).

    The caller removes the directory (``shutil.rmtree(path.parent)``).
    """
    folder = Path(tempfile.mkdtemp(prefix="conduit-sandbox-"))
    path = folder / "main.py"
    path.write_text(code, encoding="utf-8")
    launcher = folder / "launch.py"
    launcher.write_bytes(LAUNCHER_SOURCE.read_bytes())
    for file in (path, launcher):
        file.chmod(0o400)
    if run_as is not None:
        for item in (folder, path, launcher):
            os.chown(item, run_as, run_as)
    return path


def _interpreters() -> list[str]:
    """Candidate interpreters: the service's base Python (its site-packages fit it), then ``/usr/bin/python3``."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    found: list[str] = []
    for candidate in (Path(sys.base_prefix) / "bin" / f"python{version}", Path(sys.base_prefix) / "bin" / "python3",
                      Path("/usr/bin/python3")):
        if candidate.exists() and str(candidate.resolve()) not in found:
            found.append(str(candidate.resolve()))
    return found


def _site_packages() -> str | None:
    """The service's site-packages (where numpy lives), or None when it is inside ``/usr``."""
    purelib = sysconfig.get_paths()["purelib"]
    return None if purelib.startswith("/usr/") else purelib


def _prefix_of(python: str) -> str | None:
    """The install prefix of ``python`` to bind read-only, or None when it is under ``/usr``."""
    if python.startswith("/usr/"):
        return None
    return str(Path(python).parent.parent)


def _probe(plan: Plan) -> str | None:
    """Run a tiny program under ``plan``; return None when it works, else the reason."""
    expected = f"{sys.version_info.major}.{sys.version_info.minor}"
    path = prepare_code_dir("import sys\nprint('%d.%d' % sys.version_info[:2])\n", plan.run_as)
    try:
        cmd = bwrap_command(plan, str(path), cpu_s=5, max_procs=16, file_bytes=1 << 20, tmpfs_bytes=1 << 20)
        done = subprocess.run(cmd, capture_output=True, timeout=PROBE_TIMEOUT_S, env={"PATH": "/usr/bin:/bin"},
                              cwd="/", **spawn_user(plan.run_as))
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    got = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[:300]}"
    if got != expected:
        return f"{plan.python} is Python {got}, the service's packages need {expected}"
    return None


NOT_INSTALLED = "bubblewrap is not installed"
"""The reason ``find_setup`` gives when no ``bwrap`` binary is found."""


def enable_command() -> str:
    """The command that installs bubblewrap on Debian or Ubuntu (``sudo`` unless we are root)."""
    return ("" if os.geteuid() == 0 else "sudo ") + "apt-get install -y bubblewrap"


def off_message(reason: str) -> str:
    """The one line every place says while code execution is off (``bootstrap.py demo``, the
    sandbox's readiness, the ``code_exec`` tool error): why, and what turns it on."""
    how = (f"turn it on with: {enable_command()}" if reason.startswith(NOT_INSTALLED)
           else "see docs/deploy.md, \"The sandbox's isolation\"")
    return f"code execution is off ({reason}); {how}"


Setup = tuple[Plan | None, str]
"""``(plan, description)`` when isolation works, ``(None, reason)`` when it does not."""


def find_setup(bwrap: str | None = None, run_as: list[int | None] | None = None) -> Setup:
    """Probe candidate set-ups and return the first that works (uncached; ``discover`` caches it).

    ``bwrap`` overrides the binary (default: found on ``/usr/bin:/bin:/usr/local/bin``);
    ``run_as`` overrides the host uids tried (default: 65534 then our own when root).
    """
    bwrap = bwrap or shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
    if not bwrap or not Path(bwrap).exists():
        return None, NOT_INSTALLED
    if not Path(PRLIMIT).exists():
        return None, f"{PRLIMIT} is missing (util-linux)"
    site = _site_packages()
    users = run_as if run_as is not None else ([SANDBOX_UID, None] if os.geteuid() == 0 else [None])
    failures: list[str] = []
    for run_as in users:
        for python in _interpreters():
            plan = Plan(bwrap=bwrap, python=python, prefix=_prefix_of(python), site=site, run_as=run_as)
            reason = _probe(plan)
            if reason is None:
                return plan, plan.describe()
            failures.append(f"[{python} as uid {run_as if run_as is not None else os.geteuid()}] {reason}")
    return None, "bubblewrap cannot start a sandbox: " + "; ".join(failures)[:1000]


@functools.lru_cache(maxsize=1)
def discover() -> Setup:
    """The process's sandbox set-up: ``find_setup()`` run once and cached."""
    return find_setup()


def sandbox_status() -> tuple[bool, str]:
    """Readiness of code isolation: ``(True, description)`` or ``(False, reason)``. Probes once, then cached."""
    plan, text = discover()
    return plan is not None, text
