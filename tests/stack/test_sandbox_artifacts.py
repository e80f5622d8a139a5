"""code_exec artifacts: a matplotlib plot and a CSV written to the output folder come back as
artifacts, stored in the real Redis, and the real gateway serves them only to the task's owner.

Needs bubblewrap (skips with the probe's reason otherwise). One matplotlib run (~10 s on a busy
2-core box when site-packages has no compiled bytecode).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from ops import infra
from conduit.runtime.settings import Settings
from contracts.events import ToolRequested, ToolRequestPayload
from testkit.stack import auth, make_key
from services.gateway.app import create_app
from services.sandbox import isolation
from services.sandbox.main import build_service, format_output
from services.sandbox.runner import Limits, run_code

OK, WHY = isolation.sandbox_status()
pytestmark = pytest.mark.skipif(not OK, reason=f"sandbox isolation unavailable: {WHY}")

PLOT = """
import os
import matplotlib.pyplot as plt
import pandas as pd
frame = pd.DataFrame({"x": [1, 2, 3], "y": [1, 4, 9]})
frame.to_csv("/tmp/out/squares.csv", index=False)
frame.plot(x="x", y="y")
plt.savefig("out/plot.png")
print("saved", sorted(os.listdir("out")))
"""


@pytest.fixture(scope="module")
def gateway_url(infra_stack, tmp_path_factory) -> Iterator[str]:
    """The real gateway app served by uvicorn in a thread."""
    settings = Settings(kafka_bootstrap_servers=infra_stack.bootstrap, redis_url=infra_stack.redis_url,
                        data_dir=tmp_path_factory.mktemp("gw-artifacts"))
    port = infra.free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def _request(code: str, user_id: str | None) -> ToolRequested:
    call_id, task_id = uuid.uuid4().hex, str(uuid.uuid4())
    return ToolRequested(task_id=task_id, session_id="s1", user_id=user_id, payload=ToolRequestPayload(
        call_id=call_id, tool="code_exec", arguments={"code": code, "reason": "plot"}, step=1,
        idempotency_key=f"{task_id}:1:{call_id}"))


async def test_plot_and_csv_become_artifacts_served_to_the_owner_only(settings: Settings, gateway_url: str) -> None:
    service = build_service(settings.changed({"sandbox_timeout_s": 40.0}))
    request = _request(PLOT, user_id="alice")
    try:
        payload = await service.execute(request)
    finally:
        await service.redis.aclose()
    assert payload.outcome == "ok", payload.error
    assert "saved ['plot.png', 'squares.csv']" in (payload.output or ""), payload.output
    refs = {a.name: a for a in payload.artifacts}
    assert set(refs) == {"plot.png", "squares.csv"}
    plot, csv = refs["plot.png"], refs["squares.csv"]
    assert (plot.media_type, csv.media_type) == ("image/png", "text/csv")
    assert plot.url == f"/v1/artifacts/{plot.id}" and plot.bytes > 1000
    assert "plot.png (image/png" in (payload.output or "")  # the model is told about the files

    alice, mallory = [auth(await make_key(settings.store.url(), user=u, role="member")) for u in ("alice", "mallory")]
    admin, stranger = auth(await make_key(settings.store.url())), auth(await make_key(settings.store.url(), tenant="other"))
    owner = {"params": {"task_id": request.task_id}, "headers": alice}
    async with httpx.AsyncClient(base_url=gateway_url, timeout=10) as client:
        got = await client.get(plot.url, **owner)
        assert got.status_code == 200 and got.content.startswith(b"\x89PNG") and len(got.content) == plot.bytes
        assert got.headers["content-type"] == "image/png" and got.headers["x-content-type-options"] == "nosniff"
        got = await client.get(csv.url, **owner)
        assert got.text.splitlines() == ["x,y", "1,1", "2,4", "3,9"]
        assert got.headers["content-disposition"].startswith("attachment")
        assert (await client.get(plot.url, params=owner["params"], headers=admin)).status_code == 200  # tenant admin
        anonymous = await client.get(plot.url, params=owner["params"])
        assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthenticated"
        for params, headers in [({"task_id": request.task_id}, mallory),            # someone else
                                ({"task_id": request.task_id}, stranger),           # another tenant's admin
                                ({"task_id": str(uuid.uuid4())}, alice),            # another task
                                ({}, alice)]:                                       # no task named
            denied = await client.get(plot.url, params=params, headers=headers)
            assert denied.status_code == 404 and denied.json()["error"]["code"] == "artifact_not_found", (params, headers)
        unknown = await client.get("/v1/artifacts/nope", **owner)
        assert unknown.status_code == 404 and unknown.json() == denied.json()


async def test_output_files_are_capped_and_links_are_not_followed() -> None:
    code = """
import os
os.symlink("/etc/hostname", "/tmp/out/a-link")
os.symlink("/sandbox/main.py", "/tmp/out/b-link")
os.mkfifo("/tmp/out/c-fifo")
for i in range(6):
    open(f"/tmp/out/f{i}.txt", "w").write(str(i) * 100)
open("/tmp/out/zbig.bin", "wb").write(b"x" * 5000)
print("done")
"""
    limits = Limits(timeout_s=10, max_files=4, max_file_bytes=1000)
    result = await run_code(code, limits)
    assert result.exit_code == 0, result
    assert [name for name, _ in result.files] == ["f0.txt", "f1.txt", "f2.txt", "f3.txt"]
    assert result.files[0][1] == b"0" * 100 and result.files_dropped == 0  # the launcher stopped at 4
    assert "output file" not in format_output(result, limits)
    big = await run_code("open('/tmp/out/big.bin', 'wb').write(b'x' * 5000)", limits)
    assert big.files == [] and big.files_dropped == 0  # larger than the byte budget: skipped inside
    killed = await run_code("open('/tmp/out/a.txt', 'w').write('x')\nwhile True: pass", Limits(timeout_s=1.5))
    assert killed.killed_reason == "timeout" and killed.files == []
