"""A remote A2A agent's answer, folded from what its stream (or its ``Task``) said, and turned into evidence.

Pure functions over the ``a2a-sdk``'s protobuf types (no I/O), used by ``services.mcp.agents``:

- ``fold(reply, item)``: one ``StreamResponse`` (``task``, ``message``, ``status_update``,
  ``artifact_update``) applied to a ``Reply`` (an artifact chunk with ``append`` extends it, without
  replaces it, as A2A says; a ``Task`` replaces everything);
- ``evidence(name, reply, limit)``: the answer artifact's text and its source data parts
  (``{"source": {index, title, locator, url}}``, what Conduit's own A2A server sends) as one evidence
  item of kind ``tool`` (rule T10), its sources listed under the text and kept in its metadata.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from a2a.types.a2a_pb2 import Artifact, Message, StreamResponse, Task, TaskState
from google.protobuf.json_format import MessageToDict

from contracts.evidence import EvidenceItem

TERMINAL = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
            TaskState.TASK_STATE_REJECTED}
"""States after which a remote task changes no more."""
WAITING = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
"""States in which a remote task waits for its caller (Conduit does not answer them: the call fails)."""


@dataclass
class Reply:
    """What a remote agent said so far: its task id and ``state``, the text of its latest status message,
    every artifact's text and data parts by artifact id (in arrival order), or a direct ``message`` answer."""

    task_id: str = ""
    context_id: str = ""
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    status_text: str = ""
    texts: dict[str, str] = field(default_factory=dict)
    data: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    answered: bool = False
    """True when the agent answered with a plain ``Message`` (no task): that is its whole answer."""

    @property
    def done(self) -> bool:
        """True once nothing more will come (terminal, waiting for its caller, or a direct message)."""
        return self.answered or self.state in TERMINAL or self.state in WAITING

    @property
    def text(self) -> str:
        """All artifacts' text, in arrival order (the answer)."""
        return "\n\n".join(t for t in self.texts.values() if t.strip())

    @property
    def sources(self) -> list[dict[str, Any]]:
        """The ``source`` objects of every artifact's data parts (Conduit's citations), in order (whole numbers,
        which protobuf's ``Struct`` carries as floats, as ints)."""
        return [{k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in d["source"].items()}
                for parts in self.data.values() for d in parts if isinstance(d.get("source"), dict)]


def _parts(parts: Any) -> tuple[str, list[dict[str, Any]]]:
    """The text and the data objects of a list of protobuf ``Part``s."""
    texts, data = [], []
    for part in parts:
        raw = MessageToDict(part)
        if isinstance(raw.get("text"), str):
            texts.append(raw["text"])
        if isinstance(raw.get("data"), dict):
            data.append(raw["data"])
    return "".join(texts), data


def _artifact(reply: Reply, artifact: Artifact, append: bool) -> None:
    key = artifact.artifact_id or artifact.name or "answer"
    text, data = _parts(artifact.parts)
    if append and key in reply.texts:
        reply.texts[key] += text
        reply.data[key] = reply.data.get(key, []) + data
    else:
        reply.texts[key], reply.data[key] = text, data


def _status(reply: Reply, state: int, message: Message | None) -> None:
    reply.state = state
    if message is not None and message.parts:
        reply.status_text = _parts(message.parts)[0]


def _task(reply: Reply, task: Task) -> None:
    reply.task_id, reply.context_id = task.id, task.context_id
    reply.texts, reply.data = {}, {}
    for artifact in task.artifacts:
        _artifact(reply, artifact, append=False)
    _status(reply, task.status.state, task.status.message if task.status.HasField("message") else None)


def fold(reply: Reply, item: StreamResponse) -> Reply:
    """Apply one streamed item (or a whole ``Task``) to ``reply`` and return it."""
    kind = item.WhichOneof("payload")
    if kind == "task":
        _task(reply, item.task)
    elif kind == "message":
        text, data = _parts(item.message.parts)
        reply.texts, reply.data, reply.answered = {"message": text}, {"message": data}, True
    elif kind == "status_update":
        update = item.status_update
        reply.task_id = reply.task_id or update.task_id
        _status(reply, update.status.state, update.status.message if update.status.HasField("message") else None)
    elif kind == "artifact_update":
        update = item.artifact_update
        reply.task_id = reply.task_id or update.task_id
        _artifact(reply, update.artifact, update.append)
    return reply


def state_name(state: int) -> str:
    """``completed``, ``input-required``, ... for a ``TaskState`` value."""
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")  # type: ignore[arg-type]


def evidence(name: str, agent_url: str, reply: Reply, limit: int) -> EvidenceItem:
    """The answer as one evidence item of kind ``tool`` titled ``name`` (``a2a.<agent>``): its text cut to
    ``limit`` characters, then the remote sources as ``[k] title locator url`` lines (the numbers are the remote
    agent's own); metadata: the agent's URL, the remote task id and state, the sources."""
    sources = reply.sources
    lines = [" ".join(str(s.get(k) or "") for k in ("title", "locator", "url")).strip() for s in sources]
    listed = "\n".join(f"[{s.get('index', i + 1)}] {line}" for i, (s, line) in enumerate(zip(sources, lines)) if line)
    text = reply.text[:limit] or "(empty answer)"
    if listed:
        text = f"{text}\n\nSources of {name}:\n{listed}"[: limit + 2000]
    digest = hashlib.sha256(json.dumps([name, reply.task_id, text], ensure_ascii=False).encode()).hexdigest()
    return EvidenceItem(chunk_id=f"a2a:{digest[:24]}", kind="tool", title=name, url=agent_url, text=text,
                        metadata={"agent_url": agent_url, "remote_task_id": reply.task_id,
                                  "remote_context_id": reply.context_id, "state": state_name(reply.state),
                                  "sources": sources})
