"""``conduit keys create|list|revoke``: API keys in the stack's Redis (``conduit.records.apikeys``).

Talks to Redis directly (``settings.store.url()``), so with the embedded stack ``conduit up``
must be running. ``create`` prints the key once on stdout (only its hash is kept).
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import typer
from redis.exceptions import RedisClusterException
from conduit.runtime.redis_client import make_redis, not_a_cluster
from rich.console import Console
from rich.table import Table

from conduit.records import apikeys
from conduit.runtime.settings import get_settings

app = typer.Typer(help="Create, list and revoke API keys (needs the stack's Redis).", no_args_is_help=True)
console = Console(stderr=True)
out = Console(highlight=False, soft_wrap=True)

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``30d`` / ``12h`` / ``90m`` / ``3600s`` -> timedelta; raises ``typer.BadParameter``."""
    m = _DURATION.match(text.strip())
    if not m or int(m.group(1)) == 0:
        raise typer.BadParameter("use a positive number with s, m, h or d, e.g. 30d")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])


def _run(coro_fn, *args):  # noqa: ANN001, ANN202 - tiny bridge from typer to asyncio
    async def main():  # noqa: ANN202
        redis = make_redis(get_settings().store)
        try:
            return await coro_fn(redis, *args)
        finally:
            await redis.aclose()

    try:
        return asyncio.run(main())
    except OSError as exc:
        console.print(f"[red]cannot reach Redis at {get_settings().store.url()}:[/red] {exc}. Is `conduit up` running?")
        raise typer.Exit(2) from None
    except RedisClusterException as exc:  # CONDUIT_REDIS_CLUSTER=true against a single node
        console.print(f"[red]{not_a_cluster(get_settings().store, exc)}[/red]")
        raise typer.Exit(2) from None


@app.command("create")
def create(tenant: str = typer.Option(..., help="tenant the key acts for"),
           user: str = typer.Option(..., help="user the key acts as"),
           role: str = typer.Option("member", help="member (own tasks and sessions) or admin (the whole tenant)"),
           expires: str = typer.Option(None, help="lifetime, e.g. 30d, 12h (default: no expiry)"),
           label: str = typer.Option("", help="a note shown by `conduit keys list`")) -> None:
    """Create a key and print it once."""
    if role not in apikeys.ROLES:
        raise typer.BadParameter("role must be admin or member")
    lifetime = parse_duration(expires) if expires else None
    key, record = _run(apikeys.create, tenant, user, role, lifetime, label)
    console.print(f"[green]key {record.key_id}[/green] for {tenant}/{user} ({role})"
                  f"{', expires ' + record.expires_at.isoformat() if record.expires_at else ''}; shown once:")
    out.print(key)


@app.command("list")
def list_(tenant: str = typer.Option(None, help="only this tenant's keys")) -> None:
    """List keys (ids, owners, roles, dates; never the secrets)."""
    records = _run(apikeys.list_keys, tenant)
    table = Table()
    for name in ("id", "tenant", "user", "role", "label", "created", "expires"):
        # an id and the dates are never cut short: an id is pasted into `conduit keys revoke`
        table.add_column(name, no_wrap=name in ("id", "created", "expires"), min_width=12 if name == "id" else None)
    for r in records:
        table.add_row(r.key_id, r.tenant_id, r.user_id, r.role, r.label, r.created_at.isoformat(timespec="seconds"),
                      r.expires_at.isoformat(timespec="seconds") if r.expires_at else "never")
    out.print(table)


@app.command("revoke")
def revoke(key_id: str = typer.Argument(..., help="the id shown by `conduit keys list`")) -> None:
    """Revoke a key; its next request gets 401."""
    if not _run(apikeys.revoke, key_id):
        console.print(f"[red]no key {key_id}[/red]")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")
