"""The child side of an isolated engine (backends/isolated.py): loads models on one engine and runs them.

    python -m edge_inference.backends.isolated_worker CONTROL_FD

The control socket carries load and unload requests (one process may hold several models: a chip's one owner) and
one socket per slot (a lane's turn at a model); each slot is served by a thread of its own. Tensors come and go in
anonymous shared memory (memfd) whose file descriptors are passed over the sockets: nothing to clean in /dev/shm,
whoever dies first. This process ends when the service's end of the control socket closes, and with the service
(PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import pickle
import signal
import socket
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.backends.base import Backend

MESSAGE_BYTES = 1 << 16  # a datagram's most: shapes, dtypes, figures, an error line; a longer message is spilled
MAX_FDS = 3  # a slot's two blocks, and a spilled message's
SPILLED = "_spilled"
ALIGN = 64  # each output starts on a cache line in the shared block
# Where memory runs out, the kernel's OOM killer takes the process with the highest score: an engine's, whose stream
# comes back by itself, before the service, whose death ends every stream (Chrome raises its renderers likewise).
ENGINE_OOM_SCORE_ADJ = 500


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors passed with it; (None, []) when the other end is gone."""
    try:
        data, fds, _flags, _address = socket.recv_fds(sock, MESSAGE_BYTES, MAX_FDS)
    except OSError:
        return None, []
    # the peer is the service or its own child, over a socket pair no other process holds
    message = pickle.loads(data) if data else None  # noqa: S301
    if message is not None and SPILLED in message:  # too long for a datagram: it came in a block of its own
        with mapped(fds.pop(0)) as block:
            message = pickle.loads(block[: message[SPILLED]])  # noqa: S301
    return message, list(fds)


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One message; one longer than a datagram holds (a model's 98 KB class list) goes in a shared block whose
    descriptor travels with it, instead of being cut."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) <= MESSAGE_BYTES:
        socket.send_fds(sock, [data], fds or [])
        return
    fd, block = shared_block(len(data), "edge-message")
    try:
        block[: len(data)] = data
        block.close()
        socket.send_fds(sock, [pickle.dumps({SPILLED: len(data)})], [fd, *(fds or [])])
    finally:
        os.close(fd)


def shared_block(size: int, name: str) -> tuple[int, mmap.mmap]:
    """A new anonymous shared block of `size` bytes: its descriptor (to pass on) and this process's map of it."""
    fd = os.memfd_create(name)
    os.ftruncate(fd, max(size, 1))
    return fd, mmap.mmap(fd, max(size, 1))


def mapped(fd: int) -> mmap.mmap:
    """Maps a block passed by the other side; the descriptor is closed (the map keeps the memory)."""
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def packed(outputs: list[np.ndarray]) -> tuple[list[tuple[tuple[int, ...], str, int]], int]:
    """Where each output goes in the shared block: (shape, dtype, offset), and the bytes needed."""
    layout, offset = [], 0
    for output in outputs:
        layout.append((tuple(output.shape), output.dtype.str, offset))
        offset += -(-output.nbytes // ALIGN) * ALIGN
    return layout, offset


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the service that started it ends, however it ends."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the service ended before the call above
        os._exit(0)


def first_for_the_oom_killer(adjust: Path = Path("/proc/self/oom_score_adj")) -> None:
    """Linux: raises this process's OOM score to ENGINE_OOM_SCORE_ADJ. Only ever raised: that needs no privilege, and
    a higher value set for the whole service (systemd's OOMScoreAdjust=) stands."""
    with contextlib.suppress(OSError, ValueError):
        if int(adjust.read_text()) < ENGINE_OOM_SCORE_ADJ:
            adjust.write_text(str(ENGINE_OOM_SCORE_ADJ))


class Slot:
    """One lane's turn at the engine: a request in, its outputs out, through the slot's own shared blocks."""

    def __init__(self, sock: socket.socket, backend: Any) -> None:
        self.sock, self.backend = sock, backend
        self.inputs: mmap.mmap | None = None
        self.outputs: mmap.mmap | None = None

    def serve(self) -> None:
        while True:
            message, fds = receive(self.sock)
            if message is None:
                return
            if fds:  # a larger input block than the last
                self.inputs = mapped(fds[0])
            self._answer(message)

    def _answer(self, message: dict[str, Any]) -> None:
        received = time.perf_counter()
        assert self.inputs is not None
        tensor = np.ndarray(message["shape"], np.dtype(message["dtype"]), buffer=self.inputs)
        try:
            outputs, engine_ms = self.backend.run_timed(tensor)
        except Exception as exc:  # noqa: BLE001 - the engine's own refusal goes back to the caller, as in-process
            send(self.sock, {"error": str(exc), "kind": type(exc).__name__})
            return
        layout, needed = packed([np.asarray(o) for o in outputs])
        fds: list[int] = []
        if self.outputs is None or needed > len(self.outputs):
            fd, self.outputs = shared_block(needed * 2, "edge-outputs")  # room for outputs that vary a little
            fds.append(fd)
        for output, (shape, dtype, offset) in zip(outputs, layout, strict=True):
            np.ndarray(shape, np.dtype(dtype), buffer=self.outputs, offset=offset)[...] = output
        reply = {"outputs": layout, "engine_ms": engine_ms, "wall_ms": (time.perf_counter() - received) * 1e3}
        try:
            send(self.sock, reply, fds)
        finally:
            for fd in fds:
                os.close(fd)  # passed: the service maps its own


def description(backend: Backend) -> dict[str, Any]:
    """What the service's side needs to stand in for the loaded backend: what it says of itself, as the pool's
    handles copy it, and how inferences may run on it."""
    described = {f.name: getattr(backend, f.name) for f in fields(Backend)}
    return described | {"parallel": backend.parallel, "lanes": backend.lanes}


def load(request: dict[str, Any]) -> Any:
    from edge_inference.backends import open_backend

    return open_backend(request["engine"], Path(request["path"]), request["options"])


def _load(control: socket.socket, request: dict[str, Any], models: dict[int, Any]) -> None:
    try:
        models[request["id"]] = load(request)
    except Exception as exc:  # noqa: BLE001 - the engine's refusal, said by the service as in-process
        send(control, {"id": request["id"], "error": str(exc), "kind": type(exc).__name__})
        return
    send(control, {"id": request["id"], "loaded": description(models[request["id"]]), "pid": os.getpid()})


def main(control_fd: int) -> None:
    """Serves load, slot and unload requests until told to close or the service's end is gone. Several models may
    live here: a chip's one owner (a Hailo's VDevice, an Edge TPU) is the process that holds all of its models."""
    die_with_parent()
    first_for_the_oom_killer()
    control = socket.socket(fileno=control_fd)
    models: dict[int, Any] = {}
    while True:
        message, fds = receive(control)
        if message is None or message["op"] == "close":
            break
        if message["op"] == "load":
            _load(control, message, models)
        elif message["op"] == "slot" and message["id"] in models:
            slot = Slot(socket.socket(fileno=fds[0]), models[message["id"]])
            threading.Thread(target=slot.serve, name="slot", daemon=True).start()
        elif message["op"] == "unload" and message["id"] in models:
            models.pop(message["id"]).close()
        else:
            for fd in fds:
                os.close(fd)
    for backend in models.values():
        backend.close()
    os._exit(0)  # slot threads may still wait on their sockets: nothing of this process is to be kept


if __name__ == "__main__":
    main(int(sys.argv[1]))
