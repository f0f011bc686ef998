"""A loopback TCP proxy that can go silent: while ``holding`` it forwards nothing either way and
closes nothing, as a network partition, a dropped NAT entry or a black-holed route does. Tests put
it in front of a real server (the mailbox in ``tests/integration/test_silent_connections.py``,
Redis in the fault matrix) to see that a silent connection fails after its timeout instead of
holding msgx."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class SilentProxy:
    """Forwards 127.0.0.1:<port> to ``target``; while ``holding`` it forwards nothing either way and
    closes nothing: the bytes wait in the sockets' buffers, as behind a partition."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.holding = threading.Event()
        self.stopped = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.05)
        while not self.stopped.is_set():
            if self.holding.is_set():
                time.sleep(0.05)
                continue
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()

    def stop(self) -> None:
        self.stopped.set()
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()
