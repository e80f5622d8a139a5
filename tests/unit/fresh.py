"""Fresh-interpreter checks started early.

A few unit tests must run code in a new interpreter (what it imports, ``lint-imports``). Each such check is
started when its test module is imported, at collection, so it runs on the other core while the tests before
it run; the test then waits for its result. The result is the same as ``subprocess.run`` at test time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


class Started:
    """``python -c code`` in ``cwd``, started now; ``result()`` waits at most ``timeout_s`` seconds for it and
    returns its ``subprocess.CompletedProcess`` (text output). Raises ``subprocess.TimeoutExpired`` then."""

    def __init__(self, code: str, cwd: Path, timeout_s: float = 120.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.timeout_s = timeout_s
        self._done: subprocess.CompletedProcess[str] | None = None

    def result(self) -> subprocess.CompletedProcess[str]:
        if self._done is None:
            try:
                out, err = self.proc.communicate(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
            self._done = subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)
        return self._done
