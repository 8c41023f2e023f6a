"""pack_lab/tcp_proxy.py: a dropped or ended connection is really closed on both sides.

Closing a socket another thread is blocked in ``recv()`` on does not end it; the proxy once left
the Postgres side of every dropped idle connection open with no owner, and Postgres kept an idle
session for each (seen as one extra connection per sink path in the cluster soak).
"""

from __future__ import annotations

import socket
import threading
import time

from pack_lab.tcp_proxy import TcpProxy


def _idle_server():
    """A server that accepts one connection, never sends, and reports when the peer ends it."""
    listener = socket.create_server(("127.0.0.1", 0))
    ended = threading.Event()

    def serve():
        conn, _ = listener.accept()
        conn.settimeout(30)
        try:
            while conn.recv(1024):
                pass
        except OSError:
            pass
        ended.set()

    threading.Thread(target=serve, daemon=True).start()
    return listener, ended


def test_a_dropped_idle_connection_ends_on_the_server_side():
    listener, ended = _idle_server()
    with TcpProxy(listener.getsockname()[1]) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        deadline = time.monotonic() + 60  # a hang bound (the proxy never saw the client), not a speed claim
        while proxy.open_connections == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert proxy.drop(0) == 1
        assert ended.wait(60), "the server side of a dropped connection stayed open"  # hang bound
        client.close()
    listener.close()


def test_a_client_that_leaves_ends_the_server_side():
    listener, ended = _idle_server()
    with TcpProxy(listener.getsockname()[1]) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        time.sleep(0.2)
        client.close()
        assert ended.wait(60), "the server side outlived its client"  # hang bound
    listener.close()
