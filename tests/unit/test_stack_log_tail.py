"""A stack that does not come up says why: its readiness error quotes the end of each missing service's log."""

from pathlib import Path

from ops.stack import log_tail


def test_the_tail_is_the_end_of_the_log(tmp_path: Path) -> None:
    log = tmp_path / "web-1.log"
    log.write_bytes(b"x" * 5000 + "kafka: 连接被拒绝\n".encode())
    tail = log_tail(log, size=40)
    assert tail.endswith("kafka: 连接被拒绝\n") and len(tail.encode()) <= 40


def test_a_missing_log_gives_an_empty_tail(tmp_path: Path) -> None:
    assert log_tail(tmp_path / "never-started.log") == ""
