"""Sockets and addresses of the server: ports and hosts checked, sockets bound before anything loads."""

from __future__ import annotations

import socket
from typing import Any

from ..errors import OptionError

__all__ = ["bound_socket", "check_host", "check_port", "is_loopback"]


def check_port(name: str, value: Any, *, optional: bool = False) -> Any:
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise OptionError(f"{name}: got {value!r}, expected a TCP port 0..65535 (0: any free port)")
    return value


def check_host(host: Any) -> str:
    """``host`` when it is an address or a name of this machine's resolver, else a one-line OptionError."""
    if not isinstance(host, str) or not host or "\0" in host:
        raise OptionError(f"host: got {host!r}, expected an IP address or host name such as 127.0.0.1")
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise OptionError(
            f"host: got {host!r}, which is neither an IP address nor a name this machine resolves "
            f"({getattr(exc, 'strerror', None) or exc}); use e.g. 127.0.0.1 or 0.0.0.0"
        ) from None
    return host


def bound_socket(host: str, port: int, *, reuse_port: bool, protocol: str = "REST") -> socket.socket:
    """A TCP socket bound to ``host:port`` for uvicorn, bound here so that a taken port is one clear error.

    ``SO_REUSEPORT`` only when asked (one server process per GPU sharing the port): otherwise a second
    server on a taken port fails instead of silently sharing it.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it (Linux): a response written as two segments (headers, body) is not held
        # back by Nagle until the client's delayed ACK (~40 ms per keep-alive request without it).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OSError(f"{protocol}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (only this machine can connect).

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("0.0.0.0")
        (True, False)
    """
    import ipaddress

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)
