"""What every eval suite returns (``Gate``) and where their data lives (``EVALS_DIR``).

Its own module so that ``ops.evals`` (the stack suites, which runs the offline ones) and
``ops.policy_evals`` (the offline suites) both import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EVALS_DIR = Path(__file__).resolve().parents[1] / "evals"
"""The repository's ``evals/`` folder: one JSON Lines file (or text file) per suite."""


@dataclass
class Gate:
    """One checked gate: ``suite``, ``name``, ``passed`` and a human ``detail``."""

    suite: str
    name: str
    passed: bool
    detail: str = ""
