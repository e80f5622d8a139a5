"""``conduit doctor``'s command (typer): which endpoint to probe, the table, the exit status (issue 29)."""

from __future__ import annotations

import asyncio

import typer
from pydantic import ValidationError
from rich.console import Console

from ops.doctor import Endpoint, probe, render
from conduit.runtime import models
from conduit.runtime.settings import get_settings

console = Console(stderr=True)
out = Console(highlight=False, soft_wrap=True)


def endpoint(model: str | None, base_url: str | None, api_key: str | None) -> Endpoint:
    """The endpoint to probe: ``--base-url`` (ad hoc, ``--model`` is the name sent), else the configured
    model ``--model`` (default ``default``, rule A20). Raises ``typer.BadParameter`` naming the known models."""
    if base_url:
        return Endpoint(base_url, api_key, model or "default")
    settings = get_settings()
    try:
        spec = models.spec(settings.llm, model or models.DEFAULT)
    except models.UnknownModel as exc:
        raise typer.BadParameter(f"{exc} (set OPENAI_BASE_URL or CONDUIT_MODELS, or give --base-url)",
                                 param_hint="--model") from None
    except (ValidationError, ValueError) as exc:
        raise typer.BadParameter(f"CONDUIT_MODELS is malformed: {exc}", param_hint="--model") from None
    return Endpoint(spec.base_url or "", api_key or spec.key(), spec.model, spec.name)


def doctor(model: str = typer.Option(None, "--model", help="a configured model's name (CONDUIT_MODELS; default: "
                                                            "`default`), or with --base-url the model name sent"),
           base_url: str = typer.Option(None, "--base-url", help="probe this OpenAI-compatible endpoint instead"),
           api_key: str = typer.Option(None, "--api-key", envvar="CONDUIT_DOCTOR_API_KEY",
                                       help="its API key (ad hoc)"),
           timeout: float = typer.Option(30.0, "--timeout", help="longest wait per request (seconds)")) -> None:
    """Probe a model endpoint with a tiny streamed tool-call request and a plain one: which stream shapes and
    features it uses and whether Conduit reads them. Exit 0 when the agent can use it (tool calls work), else 1."""
    target = endpoint(model, base_url, api_key)
    report = asyncio.run(probe(target, timeout))
    out.print(render(report))
    failed = report.tools if report.tools.code else report.plain if report.plain.code else None
    if failed is not None:
        console.print(f"[red]error {failed.code}: {failed.error}[/red]")
    if report.usable:
        out.print("[green]usable: Conduit's agent can call tools through this endpoint[/green]")
        raise typer.Exit(0)
    out.print("[red]not usable for the agent: no kb_search call came back[/red]")
    raise typer.Exit(1)
