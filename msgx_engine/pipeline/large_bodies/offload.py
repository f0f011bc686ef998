"""A large body's work done on the second core (decisions P17, one-pass extraction, and P27, offload helper extraction).

A 10,000-flight package is a 10 MB body of 520,000 elements. The pump hands bodies of
``OFFLOAD_BYTES`` or more (``submit``, the decoder's ``hasher``) to one worker process
(``python -m msgx_engine.pipeline.large_bodies.offload``) as soon as their bytes pass the decoder's byte
checks. The worker parses the same bytes with the same hardened parser and answers three things
while the pump parses, checks, reads the day's state and extracts the package:

1. a daily schedule's later records as whole-state fields (``pipeline.large_bodies.package_split``,
   P27, offload helper extraction), which the pump takes instead of extracting them itself (``Pending.flights``);
2. the verdict of the checks of the whole tree, its depth and any XInclude element
   (``sis.decode.tree_refusal``, P32, tree checks in the helper), which the pump takes once it has written the message's
   state and before that can commit (``HandedOver.refusal``);
3. the canonical content hash (``sis.content_hash``, P17, P28, second-kind content hash), which nothing
   needs until transaction 1 binds the identity at its end (``HandedOver.payload_hash``).

Each answer is the value the pump would compute itself: the same function on the same tree. The
message of a handed-over body is a ``HandedOver``: the decoded message (``sis.decode.SisMessage``,
a plain value) with its ``Pending`` work, which the pipeline alone reads; handlers see a message.

Nothing depends on the worker being there. When it cannot be started, breaks, or has not
answered in time (``FLIGHTS_WAIT_S`` for the records, which the pump could be extracting instead,
and for the checks; ``WAIT_S`` for the hash), the pump does that work itself and the next large body starts a new
worker; an answer that is an error (``f``/``c``/``h`` frames) means the same for that body only. The worker is a plain
subprocess on two pipes, so it imports only what it runs (not the pump's main module, as a
``multiprocessing`` child would) and exits when the pump's end of its input closes, however the
pump ends.

Bodies are numbered and every answer frame carries its body's number, so a body whose answers
nobody reads (refused after it was handed over, or never asked for its hash) costs the next one a
wait, never a wrong answer: frames of an older body are skipped, and an older body whose frames
were skipped does its work in place.
"""

from __future__ import annotations

import atexit
import gc
import logging
import marshal
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from itertools import count
from typing import BinaryIO

from lxml import etree

from msgx_engine.pipeline.large_bodies.handover import HandedOver
from msgx_engine.sis.content_hash import content_hash
from msgx_engine.sis.decode import MAX_DEPTH, Meta, SisRefused, tree_refusal

log = logging.getLogger(__name__)

OFFLOAD_BYTES = 1_000_000     # below this the hash costs less than the hand-over (about 60 ms at 1 MB)
WAIT_S = 60.0                 # then the pump stops waiting for a hash and computes it itself
FLIGHTS_WAIT_S = 10.0         # the worker extracts its part in well under a second: past this, it is stuck

# An answer frame: kind (1 byte), body number (8 bytes), payload length (8 bytes), payload.
_HEAD = 17
_FLIGHTS, _NO_FLIGHTS, _HASH, _NO_HASH = b"F", b"f", b"H", b"h"
_CHECKS, _NO_CHECKS = b"C", b"c"
_ANSWERS = (_FLIGHTS, _CHECKS, _HASH)            # the order a body's frames come in
_WORK = {_FLIGHTS: "records", _CHECKS: "tree checks", _HASH: "hash"}

_lock = threading.Lock()
_worker: subprocess.Popen[bytes] | None = None
_numbers = count(1)
_seen = 0                     # the newest body an answer frame was read for
_last_sender: threading.Thread | None = None


class Pending:
    """A body handed to the worker. ``flights`` is its part of a package's records (as
    ``pipeline.large_bodies.package_split.taken`` reads it), ``checks`` the verdict of its tree checks,
    ``result`` its hash; None from any: the pump does that work itself."""

    def __init__(self, worker: subprocess.Popen[bytes], number: int) -> None:
        self.worker = worker
        self.number = number
        self._frames: dict[bytes, bytes | None] = {}     # "F"/"C"/"H" -> payload (None: nothing to use)
        self._hash: str | None = None                    # the hash, once taken or computed
        self._checked = False                            # the tree checks passed

    def message(self, meta: Meta, kind: str, root: etree._Element) -> HandedOver:
        """The decoded message of this body, waiting for this work (``sis.decode.Handover``)."""
        return HandedOver(meta, kind, root, pending=self)

    def flights(self) -> object:
        """The worker's part of the records (a fresh copy on every call), or None."""
        payload = self._frame(_FLIGHTS, FLIGHTS_WAIT_S)
        return marshal.loads(payload) if payload is not None else None

    def result(self) -> str | None:
        payload = self._frame(_HASH, WAIT_S)
        return payload.decode("ascii") if payload is not None else None

    def checks(self) -> str | None:
        """The worker's verdict of the tree checks (``sis.decode.tree_refusal``, P32): ``""`` when
        they pass, else ``reason<TAB>detail``; None: make them in place."""
        payload = self._frame(_CHECKS, FLIGHTS_WAIT_S)
        return payload.decode() if payload is not None else None

    def hash_of(self, root: etree._Element) -> str:
        """The canonical content hash: the worker's answer, awaited, or computed here on ``root``
        when it has none (the same function on the same tree: the same value); kept."""
        if self._hash is None:
            self._hash = self.result() or content_hash(root)
        return self._hash

    def refusal_of(self, root: etree._Element, *, here: bool = False) -> SisRefused | None:
        """The refusal of the tree checks ``decode`` left to the worker (P32), or None: they pass.
        The worker's verdict is awaited (it comes right after its part of a package); with
        ``here``, or when it has none, they are made on ``root``, which gives the same verdict."""
        if self._checked:
            return None
        answer = self.checks() if not here else None
        if answer is None:
            refused = tree_refusal(root, MAX_DEPTH)
        elif answer:
            reason, _, detail = answer.partition("\t")
            refused = SisRefused(reason, detail)
        else:
            refused = None
        self._checked = refused is None
        return refused

    def _frame(self, kind: bytes, wait_s: float) -> bytes | None:
        with _lock:
            if kind not in self._frames:
                _read_until(self, kind, wait_s)
            return self._frames[kind]

    def _settle_all(self) -> None:
        """No more answers will come for this body: what is missing is done in place."""
        for kind in _ANSWERS:
            self._frames.setdefault(kind, None)


def warm_up() -> None:
    """Start the worker now, so that the first large body finds it ready (its start-up, about
    0.15 s of imports, runs on the second core while the pump starts) rather than starting it
    then. Called when a pump starts; a worker that cannot be started is started again, or
    done without, when a large body comes."""
    with _lock:
        _start()


def submit(data: bytes) -> Pending | None:
    """Hand ``data`` to the worker; None when it is too small to be worth it or the worker cannot
    take it (then the decoder hashes in place and the pump extracts every record)."""
    if len(data) < OFFLOAD_BYTES:
        return None
    with _lock:
        worker = _start()
        if worker is None:
            return None
        global _last_sender
        number = next(_numbers)
        sender = threading.Thread(target=_send, args=(worker, number, data, _last_sender), name="msgx-offload-send",
                                  daemon=True)
        sender.start()
        _last_sender = sender
        return Pending(worker, number)


def _send(worker: subprocess.Popen[bytes], number: int, data: bytes, before: threading.Thread | None) -> None:
    """Write one numbered, length-prefixed body into the worker's pipe, after the body before it
    (``before``'s thread) is written whole: bodies go in, and are answered, in their numbers' order.
    A thread does it, so the pump goes on while a worker that is still starting up, or still busy
    with the body before, reads its 10 MB; a failed write shows as a missing answer (``_read_until``)."""
    if before is not None:
        before.join()
    try:
        assert worker.stdin is not None
        for part in (number.to_bytes(8, "big") + len(data).to_bytes(8, "big"), data):   # the body is not copied
            view = memoryview(part)
            while view:                   # a pipe may take a large write in parts
                view = view[worker.stdin.write(view):]
    except (OSError, ValueError) as exc:  # the worker is gone, or its input was closed (shutdown)
        log.info("the offload worker took no input (%s)", exc)


def _start() -> subprocess.Popen[bytes] | None:
    global _worker
    if _worker is not None and _worker.poll() is None:
        return _worker
    try:
        _worker = subprocess.Popen([sys.executable, "-m", "msgx_engine.pipeline.large_bodies.offload"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    except Exception as exc:       # no interpreter to run (an embedded one), no process to be had
        log.warning("large bodies handled in the pump alone: no worker process (%s: %s)", type(exc).__name__, exc)
        _worker = None
    return _worker


def _read_until(pending: Pending, kind: bytes, wait_s: float) -> None:
    """Read answer frames (the lock is held) until ``pending`` has its ``kind`` answer: frames of
    older bodies are dropped. A body whose frames were read past (an answer of a newer body was
    read) or whose worker was stopped gets None at once. On any failure, a newer body's frame
    before this one's included, the worker is stopped and ``pending`` gets None."""
    global _seen
    if pending.worker is not _worker or pending.number < _seen:   # a stopped worker's answers, or
        pending._settle_all()                                       # ones read past, are gone
        return
    worker = pending.worker
    deadline = time.monotonic() + wait_s
    try:
        assert worker.stdout is not None
        while kind not in pending._frames:
            head = _read_exactly(worker, _HEAD, deadline)
            frame, number, size = head[:1], int.from_bytes(head[1:9], "big"), int.from_bytes(head[9:], "big")
            payload = _read_exactly(worker, size, deadline)
            if number > pending.number:       # a body answers both frames in turn: never
                raise OSError(f"an answer for body {number} came before body {pending.number}'s")
            _seen = number
            if number < pending.number:
                continue
            if frame not in _ANSWERS:
                log.debug("the offload worker did no %s for body %s: %s", _WORK[frame.upper()], number,
                          payload.decode(errors="replace"))
            pending._frames[frame.upper()] = payload if frame in _ANSWERS else None
    except (OSError, AssertionError) as exc:
        _stop(f"the worker did not answer ({exc})")
        pending._settle_all()


def _read_exactly(worker: subprocess.Popen[bytes], size: int, deadline: float) -> bytes:
    assert worker.stdout is not None
    parts: list[bytes] = []
    left = size
    while left:
        wait = deadline - time.monotonic()
        ready, _, _ = select.select([worker.stdout], [], [], max(wait, 0.0))
        chunk = worker.stdout.read(min(left, 1 << 20)) if ready else b""
        if not chunk:
            raise OSError("no answer" if ready else "no answer in time")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _stop(why: str) -> None:
    global _worker
    log.warning("large body's work done in the pump: %s", why)
    worker, _worker = _worker, None
    if worker is not None:
        worker.kill()
        worker.wait()


@atexit.register
def shutdown() -> None:
    """Close the worker's input: it exits (and any answer still in flight is dropped)."""
    global _worker
    with _lock:
        worker, _worker = _worker, None
    if worker is not None and worker.stdin is not None and worker.stdout is not None:
        worker.stdin.close()
        worker.stdout.close()         # a worker writing an answer nobody will read stops too
        try:
            worker.wait(timeout=5)
        except subprocess.TimeoutExpired:
            worker.kill()


def _serve() -> None:
    """The worker: read a numbered, length-prefixed body; answer its records frame, its checks
    frame, then its hash frame; until the input closes. A failure is answered (``f``/``c``/``h``
    with the reason), never raised. A Ctrl-C at the terminal reaches the whole process group: the
    worker leaves ending to the pump, which closes its input (or dies, which closes it too)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The cyclic collector would start a collection every 700 of the ~100,000 dicts a package's
    # part builds, and now and then walk them all: 5-10% of the part's CPU. A body's
    # objects go by reference counting; what cycles they leave, ``_answer_bodies`` collects once
    # between bodies.
    gc.disable()
    inp, out = sys.stdin.buffer, sys.stdout.buffer

    def answer(kind: bytes, number: int, payload: bytes) -> None:
        out.write(kind + number.to_bytes(8, "big") + len(payload).to_bytes(8, "big"))
        out.write(payload)
        out.flush()

    try:
        _answer_bodies(inp, answer)
    except BrokenPipeError:               # the pump closed its end: nobody will read
        return


def _answer_bodies(inp: BinaryIO, answer: Callable[[bytes, int, bytes], None]) -> None:
    from msgx_engine.pipeline.large_bodies.package_split import helper_part
    from msgx_engine.sis.decode import _parser

    while True:
        head = inp.read(16)
        if len(head) < 16:
            return
        number, size = int.from_bytes(head[:8], "big"), int.from_bytes(head[8:], "big")
        data = inp.read(size)
        if len(data) < size:
            return
        root = part = None                # the body before is freed, then its cycles collected
        gc.collect()
        try:
            root = etree.fromstring(data, _parser())
        except Exception as exc:
            for kind in _ANSWERS:
                answer(kind.lower(), number, repr(exc).encode())
            continue
        try:
            part = helper_part(root)
            kind, payload = (_NO_FLIGHTS, b"not a package to share") if part is None else (_FLIGHTS,
                                                                                          marshal.dumps(part))
        except Exception as exc:          # a record the pump's own extraction gives the verdict on
            kind, payload = _NO_FLIGHTS, repr(exc).encode()
        answer(kind, number, payload)
        try:
            refused = tree_refusal(root, data=data)
            kind, payload = _CHECKS, b"" if refused is None else f"{refused.reason}\t{refused.detail}".encode()
        except Exception as exc:
            kind, payload = _NO_CHECKS, repr(exc).encode()
        answer(kind, number, payload)
        try:
            kind, payload = _HASH, content_hash(root).encode("ascii")
        except Exception as exc:
            kind, payload = _NO_HASH, repr(exc).encode()
        answer(kind, number, payload)

if __name__ == "__main__":
    _serve()
