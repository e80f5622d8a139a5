"""Ask Conduit a question as another agent would: the ``a2a-sdk``'s client finds the agent card, streams the answer.

    pip install a2a-sdk==1.3.0 httpx
    python examples/a2a_client.py --url http://127.0.0.1:8000 --key "$(cat .conduit/admin.key)" "劳动合同试用期最长多久？"

Prints the answer as it streams, then its sources (the answer artifact's data parts) and the final state. A tool
call that needs approval stops the stream in state ``input-required``; this script then asks on the terminal and
replies to the task (``approve`` / ``reject``), and the stream goes on. With ``--resume-after N`` it first reads only
N updates, drops the connection and resubscribes with ``Last-Event-ID`` (the last update's
``metadata.conduit_event_id``), to show that nothing is lost. docs/a2a.md has the mapping.
Standalone: it needs only the A2A SDK and httpx, nothing of Conduit.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

import httpx
from a2a.client import Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, TaskState
from google.protobuf.json_format import MessageToDict


def message(text: str, task_id: str = "") -> SendMessageRequest:
    """A user message (a reply to ``task_id`` when given)."""
    return SendMessageRequest(message=Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, task_id=task_id,
                                              parts=[Part(text=text)]))


def show(item: StreamResponse) -> tuple[str, int]:
    """Print one streamed item; return ``(task_id, state)`` (state 0 when the item has none)."""
    if item.HasField("task"):
        return item.task.id, item.task.status.state
    if item.HasField("artifact_update"):
        update = item.artifact_update
        if update.last_chunk:  # the checked answer and its sources
            print("\n\n" + update.artifact.parts[0].text)
            for part in update.artifact.parts[1:]:
                source = MessageToDict(part)["data"]["source"]
                print(f"  [{int(source['index'])}] {source['title']} {source.get('locator', '')}")
        elif update.artifact.parts:
            text = update.artifact.parts[0].text
            print(text if text or update.append else "\n(the agent started over)", end="", flush=True)
        return update.task_id, 0
    status = item.status_update
    return status.task_id, status.status.state


async def run(client: Client, stream, resume_after: int | None) -> tuple[str, int]:
    """Print ``stream``; with ``resume_after`` drop it after that many items and resubscribe. Returns the end."""
    task_id, state, last, seen = "", 0, "0", 0
    async for item in stream:
        got_task, got_state = show(item)
        task_id, state = got_task or task_id, got_state or state
        kind = item.WhichOneof("payload")
        last = str(int(getattr(item, kind).metadata["conduit_event_id"])) if kind != "task" else last
        seen += 1
        if resume_after is not None and seen == resume_after:
            print(f"\n-- dropped after event {last}; resubscribing --")
            context = ClientCallContext(service_parameters={"Last-Event-ID": last})
            return await run(client, client.subscribe(SubscribeToTaskRequest(id=task_id), context=context), None)
    return task_id, state


async def main(args: argparse.Namespace) -> None:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {args.key}"}, timeout=300) as http:
        client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(args.url)
        task_id, state = await run(client, client.send_message(message(args.question)), args.resume_after)
        while state == TaskState.TASK_STATE_INPUT_REQUIRED:
            answer = input("\nThe agent waits for you (approve / reject, or your answer): ").strip()
            task_id, state = await run(client, client.send_message(message(answer, task_id)), None)
        print(f"\n-- {TaskState.Name(state)} (task {task_id})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="a Conduit API key (or a JWT with CONDUIT_AUTH=jwt)")
    parser.add_argument("--resume-after", type=int, default=None, help="drop the stream after N updates, resume")
    asyncio.run(main(parser.parse_args()))
