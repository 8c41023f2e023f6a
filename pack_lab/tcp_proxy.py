"""A loopback TCP proxy whose network can be "dropped": the soak's third fault.

``TcpProxy(target_port)`` listens on a free 127.0.0.1 port and pipes every
connection to ``127.0.0.1:target_port``. :meth:`TcpProxy.drop` cuts every open
connection with a reset (``SO_LINGER 0``, as a broken network path looks to
both ends) and refuses new ones for ``seconds``; then connections go through
again. :meth:`TcpProxy.freeze` makes the open connections silent instead (bytes
vanish, no reset: what a client without a socket timeout waits on forever).
Threads only, stdlib only.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    _end(sock)


def _end(sock: socket.socket) -> None:
    """Close ``sock`` for real. ``close()`` alone does not end a socket another thread is blocked in
    ``recv()`` on (that call keeps it alive): the connection would stay open with no owner, and
    Postgres would keep an idle session for it. ``shutdown(SHUT_RD)`` wakes that ``recv()``."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._down_until = 0.0
        self._frozen: set = set()
        self._closed = False
        self.connections_total = 0
        self.drops = 0
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._down_until:
                _reset(client)  # the network is down: refused
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
                self.connections_total += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if pair in self._frozen:  # a silent network path: bytes vanish, no error, no reset
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:  # one side ended: the Postgres protocol has no half-closed use, so end both
            with self._lock:
                self._pairs.discard(pair)
            for sock in pair:
                _end(sock)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def drop(self, seconds: float) -> int:
        """Reset every open connection and refuse new ones for ``seconds``; return how many were cut."""
        self._down_until = time.monotonic() + seconds
        with self._lock:
            pairs = list(self._pairs)
            self._pairs.clear()
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)
        self.drops += 1
        return len(pairs)

    def freeze(self) -> int:
        """Silently drop every byte on the connections open now (a blackholed path); new ones work."""
        with self._lock:
            self._frozen |= self._pairs
            return len(self._pairs)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop(0)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
