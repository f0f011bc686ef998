"""A large body's canonical hash comes from the worker process and equals the one computed in
place (INV-9: the duplicate check compares it; it is computed on the second core), and
a worker that is gone, killed or never asked changes nothing but where the hash is computed. The
decoder alone (no hasher) hashes in place."""

from __future__ import annotations

import io
import marshal

import pytest
from snapshot_builders import big_package

from msgx_engine.handlers.snapshot import outline
from msgx_engine.pipeline.large_bodies import offload, package_split
from msgx_engine.sis.content_hash import content_hash, first_kind_hash
from msgx_engine.sis.decode import SisMessage
from msgx_engine.sis.decode import decode as plain_decode

pytestmark = pytest.mark.usefixtures("fresh_offload_worker")


def decode(body: str) -> SisMessage:
    """As the pump decodes: large bodies go to the helper."""
    return plain_decode(body, hasher=offload.submit)


def big(n: int = 1200) -> str:
    body = big_package(n)
    assert len(body.encode()) >= offload.OFFLOAD_BYTES
    return body


def test_a_large_body_is_hashed_by_the_worker_with_the_same_value() -> None:
    msg = decode(big())
    assert isinstance(msg, offload.HandedOver), "a large body is handed to the worker"
    assert msg.payload_hash == content_hash(msg.root)
    assert msg.pending.hash_of(msg.root) is msg.payload_hash, "the answer is kept"


def test_a_small_body_is_hashed_in_place() -> None:
    """... with the first kind of content hash, which costs less than the second below 1 MB (P28)."""
    msg = decode(big_package(3))
    assert not isinstance(msg, offload.HandedOver) and msg.payload_hash == first_kind_hash(msg.root)


def test_an_answer_nobody_read_does_not_block_the_next_body() -> None:
    """A message whose hash is never asked for (an ignored type) leaves an answer in the pipe: the
    next body reads it first and still gets its own."""
    first, second = decode(big(1200)), decode(big(1300))
    assert isinstance(second, offload.HandedOver)
    assert second.payload_hash == content_hash(second.root)
    assert first.payload_hash == content_hash(first.root)
    assert first.payload_hash != second.payload_hash


def test_a_killed_worker_means_the_hash_is_computed_in_place_and_a_new_worker_starts() -> None:
    msg = decode(big())
    assert offload._worker is not None
    offload._worker.kill()
    offload._worker.wait()
    assert msg.payload_hash == content_hash(msg.root)
    again = decode(big(1300))
    assert isinstance(again, offload.HandedOver), "the next large body starts a new worker"
    assert again.payload_hash == content_hash(again.root)


def test_no_interpreter_to_start_means_the_hash_is_computed_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offload.sys, "executable", "/nonexistent/python")
    msg = decode(big())
    assert not isinstance(msg, offload.HandedOver) and msg.payload_hash == content_hash(msg.root)


def test_a_worker_shut_down_while_a_body_is_in_flight() -> None:
    msg = decode(big())
    offload.shutdown()
    assert msg.payload_hash == content_hash(msg.root)


def test_the_decoder_alone_hashes_in_place() -> None:
    """``sis`` starts no process: only a caller that passes the helper as ``hasher`` uses it."""
    msg = plain_decode(big())
    assert not isinstance(msg, offload.HandedOver) and offload._worker is None


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for whoever adopted it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_worker_exits_when_the_pump_is_killed(tmp_path) -> None:
    """A pump killed with SIGKILL leaves no worker behind: the worker's input closes and it ends."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "pump.py"
    tests = next(p for p in sys.path if p.endswith("tests"))
    script.write_text(                          # the worker answers, then waits idle for the next body
        "import sys\n"
        f"sys.path.insert(0, {tests!r})\n"
        "from snapshot_builders import big_package\n"
        "from msgx_engine.pipeline.large_bodies import offload\n"
        "from msgx_engine.sis.decode import decode\n"
        "assert decode(big_package(1200), hasher=offload.submit).payload_hash\n"
        "print(offload._worker.pid, flush=True)\n"
        "sys.stdin.read()\n")
    pump = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert pump.stdout is not None
    worker = int(pump.stdout.readline())
    try:
        assert not _gone(worker)
        pump.send_signal(signal.SIGKILL)
        pump.wait()
        deadline = time.monotonic() + 30      # polled until it is gone, or the test fails
        while not _gone(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(worker), f"worker {worker} outlived its pump"
    finally:
        if not _gone(worker):
            os.kill(worker, signal.SIGKILL)


def test_warm_up_starts_the_worker_the_next_large_body_uses() -> None:
    """A pump starts the worker when it starts (P27), so the first large body does not wait for it."""
    offload.warm_up()
    assert offload._worker is not None and offload._worker.poll() is None
    pid = offload._worker.pid
    msg = decode(big())
    assert isinstance(msg, offload.HandedOver) and offload._worker.pid == pid
    assert msg.payload_hash == content_hash(msg.root)


def test_the_worker_answers_each_body_in_turn_and_collects_between_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's loop (run here on a byte stream, as its process runs it on its pipe) answers
    each body's records, then its tree checks (P32), then its hash, in the bodies' order; its
    collector is off (``_serve``), so it collects once before each body, after the one before is
    freed."""
    bodies = [big(), big(1300)]
    stream = b"".join(n.to_bytes(8, "big") + len(b).to_bytes(8, "big") + b
                      for n, b in enumerate((b.encode() for b in bodies), start=1))
    collected: list[int] = []
    monkeypatch.setattr(offload.gc, "collect", lambda *a: collected.append(len(answers)) or 0)
    answers: list[tuple[bytes, int, bytes]] = []
    offload._answer_bodies(io.BytesIO(stream), lambda kind, number, payload: answers.append((kind, number, payload)))
    assert [(kind, number) for kind, number, _ in answers] == [(b"F", 1), (b"C", 1), (b"H", 1),
                                                                (b"F", 2), (b"C", 2), (b"H", 2)]
    assert collected == [0, 3], "once before each body"
    assert [payload for kind, _, payload in answers if kind == b"C"] == [b"", b""], "both pass the tree checks"
    for (_, _, part), (_, _, digest), body in zip(answers[0::3], answers[2::3], bodies, strict=True):
        msg = plain_decode(body)
        assert digest.decode() == content_hash(msg.root)
        assert marshal.loads(part)[0] == offload_start(body)


def offload_start(body: str) -> int:
    """Where the worker's part of ``body``'s records starts (P27)."""
    return package_split.later_start(len(outline(plain_decode(body)).flids))
