"""The remote engine's HTTP inference request, sent and read here with a deadline for the whole request and a bound
on what is read, both of which tritonclient's HTTP client lacks: geventhttpclient's `network_timeout` is per read (a
server sending its answer a byte every 2 s held a stream for 5 minutes), and it reads a body whole whatever its size
(845 MB for an output declared as 1.2 MB took the service to 1.78 GB). The request's body and the answer's parsing
are tritonclient's own public helpers (`generate_request_body`, `InferResult.from_response_body`), so binary
tensors, JSON and shared memory are written and read exactly as its client does.

One connection per calling thread (a lane), kept alive between requests; any failure closes it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import ssl
import threading
from typing import Any

CHUNK = 1 << 20


class DeadlinePassed(TimeoutError):
    pass


class _NoAnswer(Exception):
    """The connection failed before any answer began: on a kept connection, one the server closed while idle."""


class AnswerRefused(RuntimeError):
    """An answer not read: larger than the model's outputs can be, or a redirect (never followed)."""


class HttpInference:
    def __init__(self, host: str, port: int, tls: bool, ca_file: str | None, timeout_s: float) -> None:
        self.host, self.port, self.tls, self.ca_file, self.timeout_s = host, port, tls, ca_file, timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[http.client.HTTPConnection] = []

    def _connection(self) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            host = self.host.strip("[]")  # an IPv6 address as a reference writes it
            if self.tls:
                context = ssl.create_default_context(cafile=self.ca_file)
                connection = http.client.HTTPSConnection(host, self.port, timeout=self.timeout_s, context=context)
            else:
                connection = http.client.HTTPConnection(host, self.port, timeout=self.timeout_s)
            self._local.connection = connection
            with self._lock:
                self._open.append(connection)
        return connection

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        self._local.connection = None
        connection.close()
        with self._lock:
            if connection in self._open:
                self._open.remove(connection)

    def infer(self, path: str, body: bytes, headers: dict[str, str], max_bytes: int) -> tuple[bytes, dict[str, str]]:
        """The answer's body and its headers; within `timeout_s` from connecting to the last byte, or DeadlinePassed;
        more than `max_bytes` is refused before it is read (or as soon as it passes that, without a length). A kept
        connection the server closed while idle is made anew once."""
        for last_try in (False, True):
            connection = self._connection()
            reused = connection.sock is not None
            try:
                return self._exchange(connection, path, body, headers, max_bytes)
            except _NoAnswer as none:
                if last_try or not reused:
                    raise ConnectionError(f"the server closed the connection without answering ({none})") from None
        raise AssertionError("unreachable: the last try returns or raises")

    def _exchange(
        self, connection: http.client.HTTPConnection, path: str, body: bytes, headers: dict[str, str], max_bytes: int
    ) -> tuple[bytes, dict[str, str]]:
        expired = threading.Event()

        def cut() -> None:  # the deadline: a read blocked on a trickling server returns at once
            expired.set()
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(2)

        timer = threading.Timer(self.timeout_s, cut)
        timer.daemon = True
        timer.start()
        response = None
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            said = {k.lower(): v for k, v in response.getheaders()}
            _refuse_unread(response.status, said, max_bytes)
            answer = _bounded(response, max_bytes)
            if expired.is_set():  # the deadline cut the connection: what was read ends early
                raise DeadlinePassed(f"no whole answer within timeout_s ({self.timeout_s:g} s)")
            length = said.get("content-length", "")
            if length.isdigit() and len(answer) < int(length):
                raise http.client.IncompleteRead(answer, int(length) - len(answer))
            if response.status != 200:
                raise RuntimeError(f"[{response.status}] {_error_text(answer)}")
            if response.will_close:
                self._drop(connection)
            return answer, said
        except BaseException as exc:
            self._drop(connection)
            # the deadline's cut, or the socket's own timeout (the same `timeout_s`: on a busy machine it may fire
            # first): one wording either way
            if expired.is_set() or isinstance(exc, TimeoutError):
                raise DeadlinePassed(f"no whole answer within timeout_s ({self.timeout_s:g} s)") from None
            broken = isinstance(exc, ConnectionError | http.client.IncompleteRead)
            if broken and response is None:
                raise _NoAnswer(type(exc).__name__) from None
            if broken:
                raise ConnectionError(
                    f"the server broke the connection off mid-answer ({type(exc).__name__})"
                ) from None
            raise
        finally:
            timer.cancel()

    def close(self) -> None:
        with self._lock:
            connections, self._open = self._open, []
        for connection in connections:
            connection.close()


def _refuse_unread(status: int, said: dict[str, str], max_bytes: int) -> None:
    length = said.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise AnswerRefused(
            f"it answered {int(length) / 1e6:.1f} MB, more than the {max_bytes / 1e6:.1f} MB its declared outputs "
            "can take: not read"
        )
    if 300 <= status < 400:
        raise AnswerRefused(
            f"it redirected the request to {said.get('location', 'elsewhere')}: not followed (name the server "
            "itself in the reference)"
        )


def _bounded(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    parts, read = [], 0
    while chunk := response.read(CHUNK):
        read += len(chunk)
        if read > max_bytes:
            raise AnswerRefused(
                f"it answered more than the {max_bytes / 1e6:.1f} MB its declared outputs can take: stopped reading"
            )
        parts.append(chunk)
    return b"".join(parts)


def _error_text(answer: bytes) -> str:
    try:
        return str(json.loads(answer).get("error", answer[:200]))
    except (ValueError, AttributeError):
        return answer[:200].decode(errors="replace")


VARIABLE_BOUND = 64 << 20  # an output whose size the model decides per frame (NMS inside): no size to hold it to


def answer_bound(outputs: list[Any], binary: bool) -> int:
    """The most an answer of these declared outputs may take: their bytes in binary, or as JSON text (a float
    written in full takes up to 25 characters), and room for the answer's JSON header."""
    if any(d < 0 for o in outputs for d in o.shape):
        return VARIABLE_BOUND
    elements = sum(int(math.prod(o.shape)) for o in outputs)
    per = max(o.dtype.itemsize for o in outputs) if binary else 25
    return (1 << 17) + elements * per
