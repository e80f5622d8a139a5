"""The ``conduit`` command line (typer)."""

from __future__ import annotations

import importlib

import typer

from conduit.settings import get_settings

app = typer.Typer(help="Conduit: event-driven agentic question answering.", no_args_is_help=True)


@app.command()
def serve(name: str = typer.Argument(..., help="retriever | web | sandbox | orchestrator | gateway")) -> None:
    """Run one service in the foreground until SIGTERM (what each process of the stack runs)."""
    from conduit.logs import configure_logging
    from conduit.services import SERVICES

    if name not in SERVICES:
        raise typer.BadParameter(f"unknown service {name!r}; expected one of {', '.join(SERVICES)}")
    settings = get_settings()
    configure_logging(name, settings.log_level, settings.log_json)
    module = importlib.import_module(f"services.{name}.main")
    module.main(settings)
