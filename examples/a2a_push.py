"""Ask Conduit a question and learn the answer by A2A push notification instead of holding a stream open.

    pip install a2a-sdk==1.3.0 httpx
    python examples/a2a_push.py --url http://127.0.0.1:8000 --key "$(cat .conduit/admin.key)" "劳动合同试用期最长多久？"

Starts a small HTTP receiver on ``--listen`` (default 127.0.0.1, a free port), sends the question with a push config
naming it (``configuration.taskPushNotificationConfig``, ``returnImmediately``), and prints each push as it arrives:
the task's state, then each change, and at the end the answer with its sources. Conduit refuses a receiver on a
loopback or private address unless it runs with ``CONDUIT_A2A_ALLOW_PRIVATE=true`` (rule T11; a local deployment);
otherwise give ``--listen`` a public address Conduit can reach. docs/a2a.md, "Push notifications".
Standalone: it needs only the A2A SDK and httpx, nothing of Conduit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskPushNotificationConfig

TOKEN = uuid.uuid4().hex
"""Sent back by Conduit as ``X-A2A-Notification-Token``: a push without it is not ours."""


def receiver(host: str) -> tuple[ThreadingHTTPServer, "queue.Queue[dict]"]:
    """An HTTP server on ``host`` (a free port) putting each POSTed JSON body that carries ``TOKEN`` on a queue."""
    pushes: queue.Queue[dict] = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.headers.get("x-a2a-notification-token") == TOKEN:
                pushes.put(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, pushes


async def main(url: str, key: str, question: str, listen: str, timeout_s: float) -> int:
    server, pushes = receiver(listen)
    hook = f"http://{listen}:{server.server_address[1]}/push"
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        client = await ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create_from_url(url)
        sent = SendMessageRequest(message=Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                                                  parts=[Part(text=question)]))
        sent.configuration.task_push_notification_config.CopyFrom(TaskPushNotificationConfig(url=hook, token=TOKEN))
        sent.configuration.return_immediately = True
        async for item in client.send_message(sent):
            print(f"task {item.task.id}: pushes go to {hook}")
    loop = asyncio.get_running_loop()
    while True:
        try:
            push = await loop.run_in_executor(None, pushes.get, True, timeout_s)
        except queue.Empty:
            print(f"no push within {timeout_s:g} s")
            return 1
        task = push.get("task")
        state = (task or push.get("statusUpdate", {})).get("status", {}).get("state", "?")
        print("push:", state.removeprefix("TASK_STATE_").lower())
        if task is not None:  # the task ended: its answer artifact and sources
            for artifact in task.get("artifacts", []):
                for part in artifact.get("parts", []):
                    print(part.get("text") or json.dumps(part.get("data", {}).get("source"), ensure_ascii=False))
            server.shutdown()
            return 0 if state == "TASK_STATE_COMPLETED" else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="Conduit's gateway")
    parser.add_argument("--key", required=True, help="a Conduit API key")
    parser.add_argument("--listen", default="127.0.0.1", help="the address the receiver listens on (Conduit must reach it)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the next push")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.url, args.key, args.question, args.listen, args.timeout)))
