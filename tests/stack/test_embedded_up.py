"""The embedded two-command path with auth on: ``conduit up`` (its own broker, Redis and every
service) prints a one-time login link and writes ``admin.key``; ``conduit ask`` uses the key
without being told; a request without a key gets 401."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx

from ops import infra
from testkit.waits import wait_until


def test_up_prints_a_login_link_and_ask_uses_the_admin_key(tmp_path: Path) -> None:
    port = infra.free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL")} | {
        "CONDUIT_DATA_DIR": str(tmp_path / "data"), "CONDUIT_GATEWAY_PORT": str(port),
        "CONDUIT_EMBEDDED_KAFKA_PORT": str(infra.free_port()), "CONDUIT_EMBEDDED_REDIS_PORT": str(infra.free_port()),
        "CONDUIT_LOG_LEVEL": "WARNING", "COLUMNS": "80"}
    banner = tmp_path / "up.log"
    with banner.open("wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "conduit", "up", "--no-ingest"], env=env, stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def printed() -> object:
            return re.search(r"http://\S+/#login=(\S+)", banner.read_text()) or up.poll() is not None

        assert wait_until(printed, 240, every_s=0.2) and up.poll() is None, banner.read_text()[-3000:]
        link = re.search(r"http://\S+/#login=(\S+)", banner.read_text())
        assert link, banner.read_text()[-3000:]
        base, token = f"http://127.0.0.1:{port}", link.group(1)
        key_file = tmp_path / "data" / "admin.key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600

        assert httpx.post(f"{base}/v1/tasks", json={"question": "no key"}).status_code == 401
        page = httpx.post(f"{base}/v1/login", json={"token": token})
        assert page.status_code == 200 and page.json()["role"] == "admin", page.text
        assert httpx.get(f"{base}/v1/me", headers={"Authorization": f"Bearer {page.json()['api_key']}"}).status_code == 200
        assert httpx.post(f"{base}/v1/login", json={"token": token}).status_code == 401  # single use
        again = subprocess.run([sys.executable, "-m", "conduit", "login"], env=env, capture_output=True, text=True,
                               timeout=60)  # a new link for a second browser
        fresh = re.search(rf"http://127\.0\.0\.1:{port}/#login=(\S+)", again.stdout)
        assert again.returncode == 0 and fresh and fresh.group(1) != token, again.stdout + again.stderr
        assert httpx.post(f"{base}/v1/login", json={"token": fresh.group(1)}).status_code == 200

        ask = subprocess.run([sys.executable, "-m", "conduit", "ask", "增值税的征收率是多少？"], env=env,
                             capture_output=True, text=True, timeout=180)
        assert ask.returncode == 0, ask.stdout[-2000:] + ask.stderr[-2000:]
        assert "stop it with Ctrl-C" in banner.read_text()
        empty = subprocess.run([sys.executable, "-m", "conduit", "ask", " "], env=env,
                               capture_output=True, text=True, timeout=60)
        said = " ".join(empty.stderr.split())  # the console writes to stderr
        assert empty.returncode == 2 and "error 422 invalid_request:" in said and "{" not in said, said
    finally:
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C: `up` stops its stack
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
