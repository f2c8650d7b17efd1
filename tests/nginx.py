"""A real nginx (Debian's) on a free loopback port, serving the service at a sub-path as users put it behind one."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import free_port

NGINX = next((p for p in ("/usr/sbin/nginx", "/usr/bin/nginx") if Path(p).exists()), None)


def require_nginx() -> str:
    if NGINX is None:
        if os.environ.get("CI"):
            raise RuntimeError("CI needs Debian's nginx for the reverse-proxy test: apt-get install nginx")
        pytest.skip("Debian's nginx is not installed (apt-get install nginx)")
    return NGINX


def proxy_config(folder: Path, port: int, prefix: str, upstream: str) -> str:
    """The location block the README shows, with nginx's defaults left as they are (buffering on)."""
    temp = "\n".join(
        f"{kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log;
{"user root;" if os.geteuid() == 0 else ""}
events {{ worker_connections 64; }}
http {{
    access_log off;
    {temp}
    server {{
        listen 127.0.0.1:{port};
        location {prefix} {{
            proxy_pass {upstream}/;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_set_header X-Forwarded-Prefix {prefix.rstrip("/")};
            proxy_read_timeout 1h;
        }}
    }}
}}
"""


@contextlib.contextmanager
def nginx_in_front(folder: Path, upstream: str, prefix: str = "/edge/") -> Iterator[str]:
    """nginx serving `upstream` at `prefix`; yields the proxied base URL (ending in the prefix)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "nginx.conf"
    config.write_text(proxy_config(folder, port, prefix, upstream))
    log = (folder / "nginx.out").open("ab")
    process = subprocess.Popen([require_nginx(), "-c", str(config), "-p", str(folder)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, (folder / "error.log").read_text()
                assert time.monotonic() < deadline, "nginx did not listen within 30 s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}{prefix}"
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)  # fast: the graceful stop would wait for the open video streams
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()
