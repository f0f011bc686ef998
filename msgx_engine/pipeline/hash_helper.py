"""The canonical hash of a large body, computed on the second core (issue 16, decision P17).

A 10,000-flight package is a 10 MB body of 520,000 elements. Its canonical hash costs about an
eighth of the snapshot's time, and nothing needs it until transaction 1 binds the identity at its
end. So the pump's ``decode`` hands bodies of ``OFFLOAD_BYTES`` or more (``submit``, its
``hasher``) to one worker process (``python -m msgx_engine.pipeline.hash_helper``), which parses
the same bytes with the same hardened parser and walks the same rule (``decode._canonical_hash``)
while the pump reads, extracts and writes the package. The value is the one the pump would compute
itself: the same function on the same tree. The decoder stays pure: the process lives here.

Nothing depends on the worker being there. When it cannot be started, breaks, answers with an
error, or has not answered within ``WAIT_S``, the pump computes the hash itself
(``SisMessage.payload_hash``) and the next large body starts a new worker. The worker is a plain
subprocess on two pipes, so it imports only the decoder (not the pump's main module, as a
``multiprocessing`` child would) and exits when the pump's end of its input closes, however the
pump ends. One body is in flight at a time: the next one is sent after the answer is read.
"""

from __future__ import annotations

import atexit
import logging
import select
import subprocess
import sys
import threading

log = logging.getLogger(__name__)

OFFLOAD_BYTES = 1_000_000     # below this the hash costs less than the hand-over (about 60 ms at 1 MB)
WAIT_S = 60.0                 # then the pump stops waiting and computes it itself
_ANSWER = 65                  # 64 hex digits and a newline; an error starts with "!"

_lock = threading.Lock()
_worker: subprocess.Popen[bytes] | None = None
_pending: Pending | None = None


class Pending:
    """A body handed to the worker; ``result`` is its hash, or None when the pump must compute it."""

    def __init__(self, sender: threading.Thread) -> None:
        self.sender = sender          # writes the body into the worker's pipe
        self._value: str | None = None
        self._done = False

    def result(self) -> str | None:
        with _lock:
            if not self._done:
                _read_answer(self)
        return self._value

    def _settle(self, value: str | None) -> None:
        self._value, self._done = value, True


def submit(data: bytes) -> Pending | None:
    """Hand ``data`` to the worker; None when it is too small to be worth it or the worker cannot
    take it (then the decoder hashes in place)."""
    global _pending
    if len(data) < OFFLOAD_BYTES:
        return None
    with _lock:
        if _pending is not None:          # an answer nobody asked for yet: read it first
            _read_answer(_pending)
        worker = _start()
        if worker is None:
            return None
        _pending = Pending(threading.Thread(target=_send, args=(worker, data), name="msgx-hash-send", daemon=True))
        _pending.sender.start()
        return _pending


def _send(worker: subprocess.Popen[bytes], data: bytes) -> None:
    """Write one length-prefixed body into the worker's pipe. A thread does it, so the pump goes on
    while a worker that is still starting up reads its 10 MB; a failed write shows as a missing
    answer (``_read_answer``)."""
    try:
        assert worker.stdin is not None
        for part in (len(data).to_bytes(8, "big"), data):    # the body is not copied to prefix it
            view = memoryview(part)
            while view:                   # a pipe may take a large write in parts
                view = view[worker.stdin.write(view):]
    except (OSError, ValueError) as exc:  # the worker is gone, or its input was closed (shutdown)
        log.info("the hash worker took no input (%s)", exc)


def _start() -> subprocess.Popen[bytes] | None:
    global _worker
    if _worker is not None and _worker.poll() is None:
        return _worker
    try:
        _worker = subprocess.Popen([sys.executable, "-m", "msgx_engine.pipeline.hash_helper"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, bufsize=0)
    except Exception as exc:       # no interpreter to run (an embedded one), no process to be had
        log.warning("canonical hash computed in the pump: no worker process (%s: %s)", type(exc).__name__, exc)
        _worker = None
    return _worker


def _read_answer(pending: Pending) -> None:
    """Settle ``pending`` with its hash (the lock is held); None, and the worker stopped, on any
    failure. A body whose worker has since been stopped gets None: the pump hashes it in place."""
    global _pending
    if pending is not _pending:
        pending._settle(None)
        return
    _pending = None
    worker = _worker
    answer = b""
    try:
        assert worker is not None and worker.stdout is not None
        pending.sender.join(WAIT_S)
        if pending.sender.is_alive():
            raise OSError(f"the body was not taken within {WAIT_S:.0f} s")
        while len(answer) < _ANSWER:
            ready, _, _ = select.select([worker.stdout], [], [], WAIT_S)
            chunk = worker.stdout.read(_ANSWER - len(answer)) if ready else b""
            if not chunk:
                raise OSError("no answer" if ready else f"no answer within {WAIT_S:.0f} s")
            answer += chunk
        if answer.startswith(b"!"):
            raise OSError(answer[1:].decode(errors="replace").strip())
        value: str | None = answer[:64].decode("ascii")
    except (OSError, AssertionError, UnicodeDecodeError) as exc:
        _stop(f"the worker did not answer ({exc})")
        value = None
    pending._settle(value)


def _stop(why: str) -> None:
    global _worker
    log.warning("canonical hash computed in the pump: %s", why)
    worker, _worker = _worker, None
    if worker is not None:
        worker.kill()
        worker.wait()


@atexit.register
def shutdown() -> None:
    """Close the worker's input: it exits (and any answer still in flight is dropped)."""
    global _worker, _pending
    with _lock:
        worker, _worker, _pending = _worker, None, None
    if worker is not None and worker.stdin is not None:
        worker.stdin.close()
        try:
            worker.wait(timeout=5)
        except subprocess.TimeoutExpired:
            worker.kill()


def _serve() -> None:
    """The worker: read a length-prefixed body, answer its hash, until the input closes. A Ctrl-C
    at the terminal reaches the whole process group: the worker leaves ending to the pump, which
    closes its input (or dies, which closes it too)."""
    import signal

    from lxml import etree

    from msgx_engine.sis.decode import _canonical_hash, _parser

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        data = inp.read(int.from_bytes(head, "big"))
        try:
            answer = _canonical_hash(etree.fromstring(data, _parser())).encode("ascii") + b"\n"
        except Exception as exc:       # answered, never raised: the pump then hashes in place
            answer = (b"!" + repr(exc).encode("ascii", "replace") + b" " * _ANSWER)[:_ANSWER - 1] + b"\n"
        out.write(answer)
        out.flush()


if __name__ == "__main__":
    _serve()
