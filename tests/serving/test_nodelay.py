"""The REST socket's connections have TCP_NODELAY: without it every keep-alive response waited ~40 ms for the
client's delayed ACK (Nagle holds the body segment back until the headers segment is acknowledged)."""

from __future__ import annotations

import socket

from amdinfer.serve._net import bound_socket


def test_accepted_connections_have_nodelay() -> None:
    listener = bound_socket("127.0.0.1", 0, reuse_port=False)
    try:
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
        try:
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            conn.close()
            client.close()
    finally:
        listener.close()


def test_a_plain_socket_does_not_have_it() -> None:
    """The control: a listener bound without bound_socket gives connections Nagle's default (so the test above can
    fail)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
        try:
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
        finally:
            conn.close()
            client.close()
    finally:
        listener.close()
