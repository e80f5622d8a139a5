"""The supervisor over a real stack (the session's tansu and Redis, real service processes):
a SIGKILLed orchestrator is started again and its task completes exactly once; a process that
keeps exiting is given up on with a clear message after ``supervisor_max_restarts`` restarts."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ops import infra
from ops.client import create_task, stream_task
from ops.stack import Stack
from ops.supervisor import CrashLoop, Supervisor
from conduit.runtime.settings import Settings
from testkit.scripted_model import ScriptedModel, Turn


class Running:
    """A ``Supervisor`` looping in a thread until ``stop()``; ``error`` holds what ``run`` raised."""

    def __init__(self, stack: Stack) -> None:
        self.lines: list[str] = []
        self.logged = threading.Condition()
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.supervisor = Supervisor(stack, log=self._log)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _log(self, line: str) -> None:
        with self.logged:
            self.lines.append(line)
            self.logged.notify_all()

    def _run(self) -> None:
        try:
            self.supervisor.run(self.stopping.is_set)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc

    def wait_line(self, pred: Callable[[str], bool], timeout_s: float = 90) -> str:
        with self.logged:
            assert self.logged.wait_for(lambda: any(pred(x) for x in self.lines), timeout_s), self.lines
            return next(x for x in self.lines if pred(x))

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)


def make_stack(infra_stack, data_dir: Path, services: tuple[str, ...], env: dict[str, str], **settings) -> Stack:
    s = Settings(kafka_bootstrap_servers=infra_stack.bootstrap, redis_url=infra_stack.redis_url, data_dir=data_dir,
                 gateway_port=infra.free_port(), supervisor_backoff_base_s=0.05, **settings)
    return Stack(s, services=services, extra_env=env).start()


@pytest.fixture
def agent_stack(infra_stack, tmp_path, model: ScriptedModel) -> Iterator[Stack]:
    st = make_stack(infra_stack, tmp_path / "data", ("orchestrator", "gateway"),
                    {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "CONDUIT_MODEL": "scripted",
                     "CONDUIT_LEASE_TTL_S": "3"})
    yield st
    st.stop()


def test_sigkilled_orchestrator_is_restarted_and_its_task_completes_once(agent_stack, model):
    model.push(Turn(content="写到一半被杀。" * 30, chunks=30, chunk_delay_s=0.2), Turn(content="重启后写完的答案。"))
    model.default = Turn(content="重启后写完的答案。")
    sup = Running(agent_stack)
    try:
        key = agent_stack.admin_key
        created = create_task(agent_stack.gateway_url, "监督进程测试", api_key=key)
        old_pid = agent_stack.procs["orchestrator"].pid
        events = []
        for ev in stream_task(agent_stack.gateway_url, created["task_id"], read_timeout_s=90, api_key=key):
            events.append(ev)
            if ev.event == "answer.delta" and agent_stack.procs["orchestrator"].pid == old_pid:
                agent_stack.procs["orchestrator"].kill()
        terminal = [e for e in events if e.event in ("task.completed", "task.failed", "task.cancelled")]
        assert [e.event for e in terminal] == ["task.completed"]
        assert terminal[0].data["answer"] == "重启后写完的答案[低置信度]。"  # uncited: marked (rule O1)
        line = sup.wait_line(lambda x: x.startswith("orchestrator (pid") and "killed by SIGKILL" in x)
        assert str(old_pid) in line and "restarting in" in line
        sup.wait_line(lambda x: x.startswith("orchestrator restarted"))
        assert agent_stack.procs["orchestrator"].pid != old_pid and sup.error is None
    finally:
        sup.stop()


def test_a_crash_loop_is_given_up_with_the_exit_status_and_log(infra_stack, tmp_path):
    st = make_stack(infra_stack, tmp_path / "data", ("web",), {}, supervisor_max_restarts=3)
    sup = Running(st)
    try:
        web = st.procs["web"]
        web.env["CONDUIT_SANDBOX_CONCURRENCY"] = "0"  # an invalid setting: every start exits with status 1
        web.kill()
        sup.thread.join(90)
        assert isinstance(sup.error, CrashLoop), sup.lines
        message = str(sup.error)
        assert "web exited (exit status 1) after 3 restarts in 60 s" in message and str(web.log_path) in message
        assert sum("restarted" in x for x in sup.lines) == 3
        assert any("killed by SIGKILL" in x for x in sup.lines) and any("exit status 1" in x for x in sup.lines)
        assert not (st.data_dir / "stack.json").exists()
    finally:
        sup.stop()
        st.stop()


def test_killed_redis_and_broker_come_back_on_their_ports_with_data_and_topics(tmp_path):
    """Redis keeps what it acknowledged (its AOF); a new broker gets every topic again. The broker's
    restart waits until its port leaves TIME_WAIT (tansu binds without SO_REUSEADDR): up to a minute."""
    import asyncio

    import redis as redis_sync

    from ops import probe
    from contracts import topics

    s = Settings(data_dir=tmp_path / "data", embedded_kafka_port=infra.free_port(),
                 embedded_redis_port=infra.free_port(), gateway_port=infra.free_port(), supervisor_backoff_base_s=0.05)
    st = Stack(s, services=("web",)).start()
    sup = Running(st)
    try:
        client = redis_sync.Redis.from_url(s.store.url())
        client.set("conduit:test:kept", "1")
        for key in ("redis", "tansu"):
            old = st.infra[key].pid
            st.infra[key].kill()
            sup.wait_line(lambda x, key=key: x.startswith(f"{key} restarted"), timeout_s=120)
            assert st.infra[key].pid != old and st.infra[key].running
        assert infra.port_open(s.store.embedded_redis_port) and infra.port_open(s.bus.embedded_kafka_port)
        assert client.get("conduit:test:kept") == b"1"
        assert asyncio.run(probe.missing_topics(s.bus.bootstrap_servers(), topics.ALL_TOPICS)) == []
        assert sup.error is None
    finally:
        sup.stop()
        st.stop()
