"""A model on a Triton Inference Server (or any KServe v2 / Open Inference Protocol server): its reference, and
one way to talk to it over HTTP or gRPC with NVIDIA's `tritonclient`.

The two clients of `tritonclient` differ where it matters here. The gRPC client is thread-safe but for its streams:
the lanes of a shared engine call `infer` on one channel at once, several frames in flight on one HTTP/2
connection. The HTTP client is not (its docstring: "None of the methods are thread safe"; it runs on gevent): each
lane has a client of its own, a keep-alive connection each. Its `async_infer` would keep frames in flight from one
thread, but through gevent's hub, which the service's threads do not run.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from edge_inference.backends.triton_http import DeadlinePassed, HttpInference

DEFAULT_PORTS = {"http": 8000, "grpc": 8001}
# scheme -> (protocol, TLS)
SCHEMES = {
    "triton": ("http", False),
    "triton+http": ("http", False),
    "triton+https": ("http", True),
    "triton+grpc": ("grpc", False),
    "triton+grpcs": ("grpc", True),
}
# `triton://host:port/model[/version]`; one slash after the scheme too, as a path made of the reference reads
REFERENCE = re.compile(
    r"^(?P<scheme>triton(?:\+[a-z]+)?):/{1,2}(?P<address>[^/]+)/(?P<model>[^/]+?)(?:/(?P<version>\d+))?/?$"
)
LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")
# the gRPC channel tries a lost server again at most this often (gRPC's default backoff grows to 120 s: a server
# back after a minute's outage would wait that long for its clients)
RECONNECT_BACKOFF_MS = 2000


@dataclass(frozen=True)
class TritonReference:
    protocol: str  # http or grpc
    tls: bool
    host: str
    port: int
    model: str
    version: str  # "" = the server's choice (its latest)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        scheme = {("http", False): "triton", ("http", True): "triton+https", ("grpc", False): "triton+grpc"}.get(
            (self.protocol, self.tls), "triton+grpcs"
        )
        version = f"/{self.version}" if self.version else ""
        return f"{scheme}://{self.address}/{self.model}{version}"

    @property
    def on_this_host(self) -> bool:
        return self.host.lower() in LOOPBACK or self.host.startswith("127.")


def parse_reference(text: str) -> TritonReference | None:
    """The server and model a reference names; None for anything that is not one (a file, a registry name)."""
    found = REFERENCE.match(text.strip())
    if not found or found["scheme"] not in SCHEMES:
        return None
    protocol, tls = SCHEMES[found["scheme"]]
    host, _, port = found["address"].rpartition(":")
    if not host or not port.isdigit():  # no port given (or an IPv6 address without one)
        host, port = found["address"], str(DEFAULT_PORTS[protocol])
    return TritonReference(protocol, tls, host, int(port), found["model"], found["version"] or "")


def names_server(text: str) -> bool:
    """Written as a server's reference, right or wrong (`triton:/x`, `triton+grcp://...`): answered by the engine."""
    return text.strip().lower().startswith("triton") and ":/" in text


class WithinDeadline:
    """tritonclient's HTTP client, each call of it ended at `seconds` from its start: geventhttpclient's timeouts
    are per read, so a server that trickles its answer (metadata at load) would hold the call for as long as it
    keeps sending. gevent's own timer ends the call, as the client's sockets are gevent's."""

    def __init__(self, client: Any, seconds: float) -> None:
        self._client, self._seconds = client, seconds

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._client, name)
        if not callable(found):
            return found

        def within(*args: Any, **kwargs: Any) -> Any:
            import gevent

            late = DeadlinePassed(f"no whole answer within timeout_s ({self._seconds:g} s)")
            with gevent.Timeout(self._seconds, late):
                return found(*args, **kwargs)

        return within


class ServerClient:
    """The calls the engine makes, the same over both protocols; `headers` go with every call (a token for a proxy)."""

    def __init__(self, reference: TritonReference, timeout_s: float, headers: Mapping[str, str], ca_file: str | None):
        self.reference = reference
        self.timeout_s = timeout_s
        self.headers = dict(headers) or None
        self._ca_file = ca_file
        self._local = threading.local()
        self._http_clients: list[Any] = []  # every thread's, to close
        self._lock = threading.Lock()
        if reference.protocol == "grpc":
            import tritonclient.grpc as module
        else:
            import tritonclient.http as module
        self.module = module
        self._channel: Any = None  # gRPC: one client, one channel for every thread; made at the first call
        self._request_ids = itertools.count(1)
        self._max_receive: int | None = None  # gRPC: the longest answer taken, once the outputs are known
        self._inference = HttpInference(reference.host, reference.port, reference.tls, ca_file, timeout_s)

    @property
    def client(self) -> Any:
        """gRPC: the one client. HTTP: this thread's own."""
        if self.reference.protocol == "grpc":
            if self._channel is None:
                with self._lock:
                    if self._channel is None:
                        self._channel = self._grpc()
            return self._channel
        client = getattr(self._local, "client", None)
        if client is None:
            made = self._http()
            client = self._local.client = WithinDeadline(made, self.timeout_s)
            with self._lock:
                self._http_clients.append(made)
        return client

    def _grpc(self) -> Any:
        import tritonclient.grpc as grpcclient

        args = [
            ("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", self._max_receive or grpcclient.MAX_GRPC_MESSAGE_SIZE),
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.min_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
        ]
        ref = self.reference
        return grpcclient.InferenceServerClient(
            ref.address, ssl=ref.tls, root_certificates=self._ca_file, channel_args=args
        )

    def _http(self) -> Any:
        import tritonclient.http as httpclient

        ref = self.reference
        ssl_options = {"ca_certs": self._ca_file} if ref.tls and self._ca_file else None
        return httpclient.InferenceServerClient(
            ref.address,
            connection_timeout=self.timeout_s,
            network_timeout=self.timeout_s,
            ssl=ref.tls,
            ssl_options=ssl_options,
        )

    def _timeout(self) -> dict[str, Any]:
        """gRPC takes a deadline per call; the HTTP client's timeouts are its own."""
        return {"client_timeout": self.timeout_s} if self.reference.protocol == "grpc" else {}

    def model_ready(self) -> bool:
        ref = self.reference
        return bool(self.client.is_model_ready(ref.model, ref.version, headers=self.headers, **self._timeout()))

    def metadata(self) -> dict[str, Any]:
        ref, json = self.reference, self._json()
        return dict(self.client.get_model_metadata(ref.model, ref.version, headers=self.headers, **json))

    def config(self) -> dict[str, Any]:
        """The model's configuration (the server's, auto-completed where it filled it in)."""
        ref, json = self.reference, self._json()
        found = self.client.get_model_config(ref.model, ref.version, headers=self.headers, **json)
        return dict(found.get("config", found))  # gRPC wraps it in {"config": ...}

    def statistics(self) -> dict[str, Any]:
        """The model's cumulative statistics (Triton's statistics extension), {} where the server has none."""
        ref, json = self.reference, self._json()
        found = self.client.get_inference_statistics(ref.model, ref.version, headers=self.headers, **json)
        stats = found.get("model_stats") or []
        return dict(stats[0]) if stats else {}

    def _json(self) -> dict[str, Any]:
        return {"as_json": True, **self._timeout()} if self.reference.protocol == "grpc" else {}

    def register_memory(self, name: str, key: str, size: int) -> None:
        self.client.register_system_shared_memory(name, key, size, headers=self.headers, **self._timeout())

    def extensions(self) -> set[str] | None:
        """The protocol's extensions the server names in its metadata (Triton: binary_tensor_data,
        model_configuration, statistics, system_shared_memory ...; MLServer: none); None where it cannot be read (a
        proxy that restricts it), where every extension is tried as before."""
        try:
            found = self.client.get_server_metadata(headers=self.headers, **self._json())
        except Exception:  # noqa: BLE001 - unknown: the caller tries each extension and takes its refusal
            return None
        return {str(name) for name in found.get("extensions") or []}

    def registered_memory(self) -> list[str]:
        """The names of the system shared-memory regions the server holds (every client's)."""
        found = self.client.get_system_shared_memory_status(headers=self.headers, **self._json())
        if isinstance(found, dict):  # gRPC as JSON: {"regions": {name: {...}}}
            return list((found.get("regions") or {}).keys())
        return [str(region["name"]) for region in found]

    def unregister_memory(self, name: str) -> None:
        self.client.unregister_system_shared_memory(name, headers=self.headers, **self._timeout())

    def infer(self, inputs: list[Any], outputs: list[Any], max_bytes: int) -> Any:
        """One inference. gRPC: a deadline for the call, and answers bounded by the channel's receive limit
        (`bound_answers`). HTTP: sent and read here (triton_http.py), as tritonclient's client has neither."""
        ref = self.reference
        # an id on every request: optional in the protocol, but KServe's server (0.21) fails an answer without one
        request_id = str(next(self._request_ids))
        if ref.protocol == "grpc":
            return self.client.infer(
                ref.model, inputs, ref.version, outputs=outputs, request_id=request_id, headers=self.headers,
                **self._timeout(),
            )  # fmt: skip
        body, json_size = self.module.InferenceServerClient.generate_request_body(
            inputs, outputs=outputs, request_id=request_id
        )
        headers = dict(self.headers or {})
        if json_size is not None:  # JSON, then binary tensors (Triton's extension)
            headers["Inference-Header-Content-Length"] = str(json_size)
            headers.setdefault("Content-Type", "application/octet-stream")
        else:  # the protocol's JSON alone: said so (KServe's server reads a body of another type as binary)
            headers.setdefault("Content-Type", "application/json")
        version = f"/versions/{quote(ref.version)}" if ref.version else ""
        path = f"/v2/models/{quote(ref.model)}{version}/infer"
        answer, said = self._inference.infer(path, body, headers, max_bytes)
        return self.module.InferResult.from_response_body(
            answer, False, said.get("inference-header-content-length"), said.get("content-encoding")
        )

    def bound_answers(self, max_bytes: int) -> None:
        """gRPC: the channel made again, taking no message over `max_bytes` (gRPC refuses a longer one from its
        length, before reading it). Called once the model's outputs are known, before any frame."""
        if self.reference.protocol == "grpc":
            self._max_receive = max_bytes
            with self._lock:
                channel, self._channel = self._channel, None
            if channel is not None:
                with contextlib.suppress(Exception):
                    channel.close()

    def close(self) -> None:
        self._inference.close()
        with self._lock:
            made, self._http_clients = self._http_clients, []
        if self._channel is not None:
            made.append(self._channel)
        for client in made:
            with contextlib.suppress(Exception):  # closing a connection to a server already gone
                client.close()
