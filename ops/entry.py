"""The ``conduit`` command and ``python -m conduit``: ``serve NAME`` goes straight to ``ops.serve`` (a service
process without Typer and Rich); everything else, ``serve --help`` and an unknown name included, to the Typer
CLI (``ops.cli``)."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the command in ``sys.argv``; exits as the command does."""
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "serve" and not args[1].startswith("-"):
        from ops.serve import UnknownService, run

        try:
            run(args[1])
            return
        except UnknownService:
            pass  # the CLI says why, with its usage
    from ops.cli import app

    app()
