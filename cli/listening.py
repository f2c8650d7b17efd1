"""The service's listening socket: made before anything is announced, so a port in use or an address this
machine does not have is one clear line (`edge serve`), or a finding (`edge serve --check`)."""

from __future__ import annotations

import errno
import ipaddress
import socket

import psutil

from edge_inference.edge.errors import EdgeError


def bind_advice(exc: OSError, host: str) -> str:
    """What to change: the port in use, an address this machine does not have, a name that does not resolve."""
    address = "--host (or server.host in the config, or EDGE_HOST)"
    if isinstance(exc, socket.gaierror):
        return f"{host} is not a name this machine can resolve: give {address} an IP address, 0.0.0.0 for all of them"
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{host} is not an address of this machine (ip -brief address lists them): give {address} one of its own, "
            "0.0.0.0 to listen on all of them or 127.0.0.1 for this machine alone"
        )
    if exc.errno == errno.EACCES:
        return "ports below 1024 need root: choose one above 1023 with --port (8080 is the default)"
    return "choose another port with --port (or server.port in the config, or EDGE_PORT), or stop the program using it"


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, made before anything is announced: a port in use is one clear error."""
    try:
        return listen(host, port)
    except OSError as exc:
        raise EdgeError(f"cannot listen on {host}:{port}: {exc.strerror}; {bind_advice(exc, host)}") from None


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only for sockets that say TCP, and
    # without it Nagle and delayed ACKs add about 40 ms to every keep-alive answer.
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError:
        listener.close()
        raise
    listener.listen(2048)
    listener.set_inheritable(True)
    return listener


ALL_ADDRESSES = ("0.0.0.0", "::", "")


def shown_hosts(host: str) -> list[str]:
    """The host names a URL of the service should carry: its own host, or, where it listens on every address (which
    no other machine can open: `http://0.0.0.0:8080`), this machine's addresses other machines can reach, IPv4
    first; `localhost` where it has none (no network yet)."""
    if host in ("127.0.0.1", "localhost", "::1"):
        return ["localhost"]
    if host not in ALL_ADDRESSES:
        return [f"[{host}]" if ":" in host else host]
    families = (socket.AF_INET, socket.AF_INET6) if host == "::" else (socket.AF_INET,)
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family not in families:
                continue
            address = ipaddress.ip_address(entry.address.split("%")[0])
            if not (address.is_loopback or address.is_link_local or address.is_multicast):
                found.append(address)
    found.sort(key=lambda a: (a.version, int(a)))
    return [str(a) if a.version == 4 else f"[{a}]" for a in found] or ["localhost"]
