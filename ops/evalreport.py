"""What ``conduit evals run`` shows: a rich table in the terminal and one self-contained HTML report
(docs/evals.md). Both list every golden case with its ``pass^k`` (rule E11) and every other gate."""

from __future__ import annotations

import html
from datetime import datetime, timezone

from rich.table import Table

from ops.gates import Gate
from ops.golden import CaseResult


def _row(r: CaseResult) -> list[str]:
    o = r.runs[0][0] if r.runs else None
    did = "" if o is None else f"{o.outcome} {o.mode or o.code or ''}".strip()
    return [r.case["id"], r.case.get("category", ""), f"{r.passes}/{len(r.runs)}", "PASS" if r.passed else "FAIL",
            did, ", ".join(o.tools) if o else "", r.detail() if not r.passed else f"{len(o.citations) if o else 0} cited"]


def table(results: list[CaseResult], gates: list[Gate]) -> Table:
    """One rich table: the golden cases (id, category, runs passed, pass^k, outcome, tools, detail), then the gates."""
    t = Table(title="conduit evals", show_lines=False)
    for name in ("suite / case", "category", "runs", "pass^k", "outcome", "tools", "detail"):
        t.add_column(name, overflow="fold")
    for r in results:
        cells = _row(r)
        cells[3] = "[green]PASS[/green]" if r.passed else "[red]FAIL[/red]"
        t.add_row(*cells)
    for g in gates:
        t.add_row(g.name, g.suite, "", "[green]PASS[/green]" if g.passed else "[red]FAIL[/red]", "", "", g.detail)
    return t


def summary(results: list[CaseResult], gates: list[Gate]) -> str:
    """``golden a/b cases pass^k, gates c/d``."""
    return (f"golden: {sum(r.passed for r in results)}/{len(results)} cases pass^k; "
            f"gates: {sum(g.passed for g in gates)}/{len(gates)} passed")


def to_html(results: list[CaseResult], gates: list[Gate], k: int) -> str:
    """The report as one HTML page (no scripts, no external files)."""
    e = html.escape
    rows = "".join("<tr class='{}'>{}</tr>".format("pass" if r.passed else "fail",
                                                   "".join(f"<td>{e(str(c))}</td>" for c in _row(r))) for r in results)
    grows = "".join(f"<tr class='{'pass' if g.passed else 'fail'}'><td>{e(g.suite)}</td><td>{e(g.name)}</td>"
                    f"<td>{'PASS' if g.passed else 'FAIL'}</td><td>{e(g.detail)}</td></tr>" for g in gates)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>conduit evals</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse;margin-bottom:2em}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}tr.fail{{background:#fde2e2}}
tr.pass td:nth-child(4){{color:#137333}}</style></head><body>
<h1>conduit evals</h1><p>{e(when)}; pass^k with k = {k}: a case passes when all its k runs pass and end the same way.
</p><p><b>{e(summary(results, gates))}</b></p>
<h2>Golden set</h2><table><tr><th>case</th><th>category</th><th>runs passed</th><th>pass^k</th><th>outcome</th>
<th>tools</th><th>detail</th></tr>{rows}</table>
<h2>Gates</h2><table><tr><th>suite</th><th>gate</th><th>result</th><th>detail</th></tr>{grows}</table></body></html>
"""
