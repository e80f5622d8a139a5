"""Run Conduit as an AG-UI agent from a script: post a ``RunAgentInput``, print the AG-UI events as they come.

    pip install ag-ui-protocol==1.0.0 httpx
    python examples/agui_client.py --url http://127.0.0.1:8000 --key "$(cat .conduit/admin.key)" "小规模纳税人的征收率是多少？"

Each event is parsed with the ``ag-ui-protocol`` models (an event that does not fit stops the script). The answer's
text is printed as it streams, tool calls and results as one line each; a run that ends with an approval
interrupt asks on the terminal and starts a resuming run (``resume``: the interrupt's id and the decision).
``--thread`` continues a conversation. docs/agui.md has the mapping. Standalone: it needs only the AG-UI package
and httpx, nothing of Conduit.
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

import httpx
from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)


def run(http: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """Post one run and print its events; returns the last event (``RUN_FINISHED`` or ``RUN_ERROR``) as JSON."""
    last: dict[str, Any] = {}
    with http.stream("POST", f"{url}/v1/agui", json=body) as resp:
        if resp.status_code != 200:
            raise SystemExit(f"{resp.status_code}: {resp.read().decode()}")
        for line in resp.iter_lines():
            if not line.startswith("data:"):
                continue
            data = json.loads(line[5:])
            EVENT.validate_python(data)  # the ag-ui-protocol model of its type
            kind, last = data["type"], data
            if kind == "TEXT_MESSAGE_CONTENT":
                print(data["delta"], end="", flush=True)
            elif kind == "TOOL_CALL_START":
                print(f"\n[tool {data['toolCallName']}]", flush=True)
            elif kind == "TOOL_CALL_RESULT":
                print(f"[result] {data['content'][:200]}", flush=True)
            elif kind == "TEXT_MESSAGE_END":
                print()
    return last


def main(args: argparse.Namespace) -> None:
    thread = args.thread or uuid.uuid4().hex
    body: dict[str, Any] = {"threadId": thread, "runId": uuid.uuid4().hex,
                            "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": args.question}]}
    with httpx.Client(headers={"Authorization": f"Bearer {args.key}"}, timeout=300) as http:
        while True:
            end = run(http, args.url, body)
            outcome = end.get("outcome") or {}
            if end.get("type") == "RUN_ERROR":
                raise SystemExit(f"run error {end.get('code')}: {end.get('message')}")
            if outcome.get("type") != "interrupt":
                break
            waiting = outcome["interrupts"][0]
            decision = input(f"\n{waiting.get('message', 'approve?')} [approve/reject] ").strip() or "approve"
            body = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": [], "resume": [
                {"interruptId": waiting["id"], "status": "resolved", "payload": {"decision": decision}}]}
    result = end.get("result") or {}
    for c in result.get("citations") or []:
        print(f"  [{c['index']}] {c['title']} {c.get('locator') or ''}")
    print(f"-- {outcome.get('type', 'finished')} (thread {thread})")


OPTIONS = {"question": {}, "--url": {"default": "http://127.0.0.1:8000"},
           "--key": {"required": True, "help": "a Conduit API key (or a JWT with CONDUIT_AUTH=jwt)"},
           "--thread": {"default": None, "help": "continue this thread (a Conduit session id)"}}


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, options in OPTIONS.items():
        cli.add_argument(flag, **options)
    main(cli.parse_args())
