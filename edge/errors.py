"""Runtime failures the user can act on (images, sources, configuration)."""

from __future__ import annotations

import socket

from edge_inference.extras import install_extra


class EdgeError(RuntimeError):
    """The message says what went wrong and what to do; no traceback is shown for these."""


def needs_events_extra(what: str, exc: ImportError) -> EdgeError:
    """Tracking, events and MQTT are an optional extra; without it, say how to install it."""
    return EdgeError(f"{what} needs the events extra ({exc.name or exc} is missing): {install_extra('events')}")


def connection_failure(exc: OSError, host: str, port: int, timeout_s: float, running: str) -> str:
    """Why a TCP connection to a camera, a broker or a webhook failed, in words that say what to check."""
    where = f"{host}:{port}"
    if isinstance(exc, socket.gaierror):
        # Raspberry Pi OS resolves `homeassistant.local` through Avahi; a container or a minimal system does not
        mdns = " (.local names need mDNS, which containers and some systems lack: give the IP address)"
        return f"the name {host} does not resolve{mdns if host.endswith('.local') else ''}: check the address"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing listens at {where}: check the address and port, and that {running}"
    if isinstance(exc, TimeoutError):
        return f"{where} does not answer within {timeout_s:g} s: check the network, a firewall, and the address"
    return f"{where} cannot be reached ({exc.strerror or exc}): check the network and the address"


def counted(number: int, thing: str, things: str | None = None) -> str:
    """`1 pair`, `2 pairs`: a count with its noun (`things` where the plural is not `thing` + s)."""
    return f"{number} {thing if number == 1 else things or thing + 's'}"
