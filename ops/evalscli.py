"""``conduit evals``: ``run`` (the golden set with pass^k, the memory suite, the retrieval gate and the offline
suites; a table and an HTML report), ``policy`` (the guardrail, routing, fault-injection and security corpora, as
gates) and ``add --from-task ID`` (a real task becomes a golden case). docs/evals.md."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

app = typer.Typer(help="The release gates: the 50-case golden set (pass^k), the memory suite and the retrieval gate, with a table and an HTML report (run); the guardrail, routing, fault and security corpora (policy); add a real task as a case (add). docs/evals.md.", no_args_is_help=True)
out = Console()


@app.command("run")
def run(url: str = typer.Option(None, help="a gateway whose model is the golden scripted model (default: a private stack)"),
        key: str = typer.Option(None, help="API key for --url (default: CONDUIT_API_KEY, else <data_dir>/admin.key)"),
        memory_key: str = typer.Option(None, help="with --url: a key of the memory suite's own user (its memory is deleted first)"),
        suite: list[str] = typer.Option(None, help="golden | memory | retrieval | guardrails | routing (repeatable; default all)"),
        k: int = typer.Option(3, min=1, help="runs per golden case (pass^k)"),
        case: list[str] = typer.Option(None, help="only these golden case ids (repeatable)"),
        golden_file: Path = typer.Option(None, "--file", help="the golden file (default evals/golden.yaml)"),
        html: Path = typer.Option(Path("evals-report.html"), help="where the HTML report is written")) -> None:
    """Run the suites, print a table, write the HTML report; exit 1 when a case or gate fails."""
    from ops import evalreport, evalrun, golden

    target = evalrun.Target(url.rstrip("/"), key, memory_key) if url else None
    suites = tuple(suite) if suite else evalrun.SUITES
    unknown = set(suites) - set(evalrun.SUITES)
    if unknown:
        out.print(f"[red]unknown suite[/red] {sorted(unknown)}: choose from {evalrun.SUITES}")
        raise typer.Exit(2)
    result = evalrun.run(target, suites, k, golden_file or golden.GOLDEN, tuple(case or ()))
    out.print(evalreport.table(result.results, result.gates))
    html.write_text(evalreport.to_html(result.results, result.gates, k), encoding="utf-8")
    out.print(f"{evalreport.summary(result.results, result.gates)}; report: {html}")
    if "memory" in suites and url and not memory_key:
        out.print("[yellow]memory suite skipped:[/yellow] give --memory-key (a key of a user of its own)")
    raise typer.Exit(0 if result.passed else 1)


@app.command("policy")
def policy(fast: bool = typer.Option(False, "--fast", help="only the rows marked fast (what CI runs)"),
           url: str = typer.Option(None, help="run against this gateway instead of a private stack"),
           suite: list[str] = typer.Option(None, help="guardrails | routing | golden | fault | security (repeatable; default all)")) -> None:
    """Run the policy corpora (guardrails, routing, the first golden questions, fault injection, security) as
    gates; exit 1 when a gate fails."""
    from ops.evals import SUITES
    from ops.evals import run as run_gates

    gates = run_gates(url, fast, tuple(suite) if suite else SUITES)
    for g in gates:
        mark = "[green]PASS[/green]" if g.passed else "[red]FAIL[/red]"
        out.print(f"{mark} {g.suite:9} {g.name}  [dim]{g.detail}[/dim]")
    failed = [g for g in gates if not g.passed]
    out.print(f"{len(gates) - len(failed)}/{len(gates)} gates passed")
    raise typer.Exit(1 if failed or not gates else 0)


@app.command("add")
def add(from_task: str = typer.Option(..., "--from-task", help="the task id to turn into a case"),
        url: str = typer.Option(None, help="the gateway that ran the task (default from settings)"),
        key: str = typer.Option(None, help="API key (default: CONDUIT_API_KEY, else <data_dir>/admin.key)"),
        golden_file: Path = typer.Option(None, "--file", help="the golden file (default evals/golden.yaml)")) -> None:
    """Append the case made from task --from-task (its question, tool calls, evidence and outcome) to the golden set."""
    import httpx

    from conduit.runtime.settings import get_settings
    from ops import evalcases, golden

    s = get_settings().gateway
    url = url or f"http://{s.gateway_host}:{s.gateway_port}"
    try:
        case = evalcases.add_from_task(url.rstrip("/"), key, from_task, golden_file or golden.GOLDEN)
    except httpx.HTTPStatusError as exc:
        out.print(f"[red]task {from_task}:[/red] {exc.response.status_code} {exc.response.text[:300]}")
        raise typer.Exit(1) from exc
    except evalcases.TaskNotUsable as exc:
        out.print(f"[red]not added:[/red] {exc}")
        raise typer.Exit(1) from exc
    out.print(f"added case [bold]{case['id']}[/bold] ({case['expect']}) to {golden_file or golden.GOLDEN}")
