"""Runs INSIDE the sandbox (stdlib only): start the user's code, then hand its output files out.

Bound read-only at ``isolation.LAUNCHER_PATH`` and started by ``prlimit`` as
``python -s -B LAUNCHER_PATH MAX_FILES MAX_BYTES FD``. It

1. creates the output folder ``/tmp/out`` (also ``./out``: the working directory is ``/tmp``)
   and ``MPLCONFIGDIR``;
2. runs ``/sandbox/main.py`` as a child process with the same stdin/stdout/stderr and
   environment, WITHOUT the artifact pipe (``close_fds``), so the user's code cannot write to it;
3. when the child has exited, writes up to ``MAX_FILES`` regular files of the output folder
   (symlinks, devices and FIFOs skipped; at most ``MAX_BYTES`` in total) to the pipe ``FD``
   inherited from the host (-1: none), as ``{"name", "bytes"}\\n`` JSON header lines each followed by exactly that many bytes;
4. exits with the child's status, or 128 + N when signal N killed it (bwrap's convention).

The host (``runner``) re-checks every cap while reading: this file only avoids useless work,
it is not a security boundary (the user's code runs with the same uid and could kill it).
"""

import json
import os
import signal
import subprocess
import sys

OUT_DIR = "/tmp/out"
CODE = "/sandbox/main.py"


def _files(root, max_files):
    """Regular files under ``root`` (relative names, sorted, at most ``max_files``), never following links."""
    found = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if (st.st_mode & 0o170000) == 0o100000:  # S_ISREG, without importing stat
                found.append((os.path.relpath(path, root), path, st.st_size))
            if len(found) >= max_files:
                return found
    return found


def _send(fd, max_files, max_bytes):
    try:
        out = os.fdopen(fd, "wb", buffering=0)
    except OSError:  # no pipe from the host
        return
    budget = max_bytes
    try:
        for name, path, size in _files(OUT_DIR, max_files):
            if size > budget:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                data = f.read(size + 1)[:size]
            budget -= len(data)
            out.write(json.dumps({"name": name, "bytes": len(data)}).encode() + b"\n" + data)
    except OSError:  # the host stopped reading
        pass
    finally:
        try:
            out.close()
        except OSError:
            pass


def main():
    max_files, max_bytes, fd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    for folder in (OUT_DIR, os.environ.get("MPLCONFIGDIR")):
        if folder:
            os.makedirs(folder, exist_ok=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = subprocess.call([sys.executable, "-s", "-B", CODE], close_fds=True)
    except OSError as exc:
        print("sandbox: cannot start the code: %s" % exc, file=sys.stderr)
        return 126
    if max_files > 0 and fd >= 0:
        _send(fd, max_files, max_bytes)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
