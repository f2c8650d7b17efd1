"""An engine in a process of its own: a native crash, a hang or the OOM killer ends that process, not the service.

A vendor library that aborts (libedgetpu's USB driver answers a failed transfer with LOG(FATAL)), segfaults or
hangs in native code takes its whole process with it, and no Python code can catch that. Frigate runs each detector
in a process of its own for this reason. Here `IsolatedBackend` is a `Backend` like any other, so the pool, its
scheduler, lanes, batching and timings stay as they are; underneath, `run` hands the tensor to a child process
(backends/isolated_worker.py) through anonymous shared memory and waits for its outputs the same way. Only a few
hundred bytes of control go through a socket per inference.

When the child dies, every call waiting on it and every later one raises `EngineCrashed` with one line saying how
(`SIGABRT`, `SIGSEGV`, `killed: out of memory`, `hung 30 s`); the stream's keeper then loads it again, with backoff.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge_inference.backends.base import Backend, BackendError, BackendOptions, BackendRefused
from edge_inference.backends.isolated_worker import mapped, receive, send, shared_block

CLOSE_WAIT_S = 5.0  # for a child to end by itself once told, before it is killed
INCIDENTS = 20  # engine deaths remembered for /api/v1/backends and `edge doctor`


class EngineCrashed(BackendError):
    """The engine's process died (a signal, an exit, the OOM killer) or was killed after it hung."""


@dataclass(frozen=True)
class Incident:
    """One engine process's death, as said to the streams on it."""

    at: float  # wall clock
    engine: str
    model: str
    device: str
    how: str  # "SIGABRT", "killed: out of memory", "hung 30 s", "exited with status 3"

    @property
    def line(self) -> str:
        return f"the {self.engine} engine ({self.model} on {self.device}) died: {self.how}"


DEATHS_FILE = "engine-deaths.json"  # in the model cache: what `edge doctor`, another process, reads


def remember(incident: Incident, folder: Path | None) -> None:
    """Kept in `folder` (the model cache; the last INCIDENTS) for /api/v1/backends and `edge doctor`."""
    if folder is None:
        return
    earlier = [asdict(known) for known in recorded(folder)][-(INCIDENTS - 1) :]
    kept = [*earlier, asdict(incident)]
    with contextlib.suppress(OSError):  # a read-only cache loses the record, never the stream
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{DEATHS_FILE}.{os.getpid()}"
        partial.write_text(json.dumps(kept, indent=1))
        partial.replace(folder / DEATHS_FILE)


def recorded(folder: Path) -> list[Incident]:
    """The engine deaths recorded in `folder`, oldest first; none where there is no readable record."""
    try:
        rows = json.loads((folder / DEATHS_FILE).read_text())
        return [Incident(**row) for row in rows]
    except (OSError, ValueError, TypeError):
        return []


def oom_kills(proc: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """How many processes the kernel's OOM killer has killed in this process's memory cgroup (v2 or v1), or None
    where that cannot be read."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            counts = root / relative / "memory.events"
        elif "memory" in controllers.split(","):
            counts = root / "memory" / relative / "memory.oom_control"
        else:
            continue
        kills = oom_kills_in(counts)
        if kills is not None:
            return kills
    return None


def oom_kills_in(counts: Path) -> int | None:
    """The `oom_kill` count of a memory cgroup's memory.events (v2) or memory.oom_control (v1); None where unread."""
    try:
        fields = dict(line.split() for line in counts.read_text().splitlines() if line.count(" ") == 1)
    except OSError:
        return None
    return int(fields["oom_kill"]) if "oom_kill" in fields else None


def how_it_died(returncode: int, ooms_before: int | None, ooms_after: int | None) -> str:
    if returncode >= 0:
        return f"exited with status {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    if number == signal.SIGKILL:
        grew = ooms_before is not None and ooms_after is not None and ooms_after > ooms_before
        return "killed: out of memory" if grew else "killed (SIGKILL: out of memory, or killed by someone)"
    return name


def _stderr_fd() -> int:
    """This process's stderr, where it is a file (2 where something stands in for it, as a test's capture does)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def child_environment() -> dict[str, str]:
    """The service's environment, with its import path: plugins and stand-ins found here are found there."""
    path = [entry for entry in sys.path if entry and Path(entry).is_dir()]
    return dict(os.environ) | {"PYTHONPATH": os.pathsep.join(path)}


class _Spawner:
    """Children are started from one thread that lives as long as the service: the kernel's PR_SET_PDEATHSIG (the
    child's guard against outliving the service) fires when the *thread* that started it ends, and a stream's
    loading thread ends right after its load."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[list[str], dict[str, Any], queue.SimpleQueue[Any]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def popen(self, args: list[str], **options: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="engine-spawner", daemon=True)
                self._thread.start()
        answer: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._requests.put((args, options, answer))
        started = answer.get()
        if isinstance(started, BaseException):
            raise started
        return started

    def _serve(self) -> None:
        while True:
            args, options, answer = self._requests.get()
            try:
                answer.put(subprocess.Popen(args, **options))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                answer.put(exc)


_spawner = _Spawner()


class _Slot:
    """The service's end of one lane's socket, with its input block."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inputs: Any = None  # mmap of the input block
        self.outputs: Any = None  # mmap of the output block, as the child last passed it

    def run(self, tensor: np.ndarray) -> dict[str, Any] | None:
        """The child's reply for one input; None when the child is gone."""
        fds: list[int] = []
        if self.inputs is None or tensor.nbytes > len(self.inputs):
            fd, self.inputs = shared_block(tensor.nbytes, "edge-inputs")
            fds.append(fd)
        np.ndarray(tensor.shape, tensor.dtype, buffer=self.inputs)[...] = tensor
        try:
            send(self.sock, {"shape": tensor.shape, "dtype": tensor.dtype.str}, fds)
        except OSError:
            return None
        finally:
            for fd in fds:
                os.close(fd)
        reply, passed = receive(self.sock)
        if passed:
            self.outputs = mapped(passed[0])
        return reply

    def outputs_of(self, reply: dict[str, Any]) -> list[np.ndarray]:
        """The outputs, copied out of the block the next inference on this slot will overwrite."""
        return [
            np.ndarray(shape, np.dtype(dtype), buffer=self.outputs, offset=offset).copy()
            for shape, dtype, offset in reply["outputs"]
        ]

    def close(self) -> None:
        self.sock.close()
        for block in (self.inputs, self.outputs):
            if block is not None:
                with contextlib.suppress(BufferError):  # a view still held: freed with it
                    block.close()


class EngineHost:
    """A child process holding one or more loaded models, its control socket, and how it died."""

    def __init__(self, key: str, records: Path | None) -> None:
        self.key, self.records = key, records
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ooms = oom_kills()
        with theirs:
            self.process = _spawner.popen(
                [sys.executable, "-m", "edge_inference.backends.isolated_worker", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=_stderr_fd(),  # an engine's banner never reaches a JSON answer on stdout
                env=child_environment(),
                start_new_session=True,  # a Ctrl-C reaches the service, which closes its engines itself
            )
        self.control = ours
        self._sending = threading.Lock()  # one message at a time on the control socket
        self._loading = threading.Lock()  # a load's request and its answer together (answers come in order)
        self._lock = threading.Lock()  # the models held and the death's reason
        self.models: dict[int, str] = {}  # id -> model file name
        self._ids = itertools.count()
        self._killed_for: str | None = None  # why the service killed it (a hang)
        self.death: str | None = None

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        with self._sending:
            send(self.control, message, fds)

    def load(self, engine: str, path: Path, options: BackendOptions) -> tuple[int, dict[str, Any]]:
        """A model loaded in this process: its id here and its description."""
        number = next(self._ids)
        with self._lock:
            self.models[number] = path.name
        with self._loading:
            with contextlib.suppress(OSError):  # a child that died: its death is the answer below
                self.send({"op": "load", "id": number, "engine": engine, "path": str(path), "options": options})
            answered, _, _ = select.select([self.control], [], [], options.load_deadline_s)
            if not answered:  # killed: the wait below ends with its death, said as this
                self.kill(
                    f"it had not loaded {path.name} after {options.load_deadline_s:g} s (a driver or device that hangs)"
                )
            reply, _ = receive(self.control)
        if reply is None:
            raise EngineCrashed(f"{self.died(engine, options.device)} while loading")
        if "error" in reply:
            with self._lock:
                self.models.pop(number, None)
            raise _rebuilt(reply)
        return number, dict(reply["loaded"])

    def unload(self, number: int) -> bool:
        """Tells the child to close one model; True when it held no other (the host is then closed)."""
        with self._lock:
            self.models.pop(number, None)
            last = not self.models
        if not last:
            with contextlib.suppress(OSError):
                self.send({"op": "unload", "id": number})
        return last

    def died(self, engine: str, device: str) -> str:
        """Why the child is gone, once it is (reaped here); the same line for every caller."""
        code = self.process.wait()
        with self._lock:
            first = self.death is None
            if first:
                how = self._killed_for or how_it_died(code, self._ooms, oom_kills())
                incident = Incident(time.time(), engine, ", ".join(sorted(set(self.models.values()))), device, how)
                self.death = incident.line
            death = str(self.death)
        if first:
            remember(incident, self.records)  # on disk: outside the lock
        return death

    @property
    def alive(self) -> bool:
        return self.death is None and self.process.poll() is None

    def kill(self, why: str) -> None:
        """End a child that stopped answering; calls waiting on it then raise `EngineCrashed` with `why`."""
        with self._lock:
            if self._killed_for is None and self.death is None:
                self._killed_for = why
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def close(self) -> None:
        """Tell the child to end; killed if it has not within CLOSE_WAIT_S. Nothing of it is left behind."""
        with contextlib.suppress(OSError):
            self.send({"op": "close"})
        self.control.close()
        try:
            self.process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_hosts: dict[str, EngineHost] = {}  # shared hosts (a chip's one owner), by key
_hosts_lock = threading.Lock()


def _host_for(key: str | None, records: Path | None) -> EngineHost:
    """The living host for `key` (a chip's models share one process), or a new one; None: a process of its own."""
    if key is None:
        return EngineHost("", records)
    with _hosts_lock:
        host = _hosts.get(key)
        if host is None or not host.alive:
            host = _hosts[key] = EngineHost(key, records)
        return host


def _forget_host(host: EngineHost) -> None:
    with _hosts_lock:
        if _hosts.get(host.key) is host:
            del _hosts[host.key]


class ChildEngine:
    """One model in an engine host: its slots (a socket and shared blocks per lane) and its runs."""

    def __init__(self, engine: str, path: Path, options: BackendOptions, host_key: str | None = None) -> None:
        self.engine, self.path, self.options, self.device = engine, path, options, options.device
        self.host = _host_for(host_key, options.cache_dir)
        self._free: queue.SimpleQueue[_Slot] = queue.SimpleQueue()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self.number = -1

    def load(self) -> dict[str, Any]:
        try:
            self.number, described = self.host.load(self.engine, self.path, self.options)
        except BaseException:
            self.close()
            raise
        self.device = described["device"]
        return described

    def run(self, tensor: np.ndarray) -> tuple[list[np.ndarray], float]:
        """Outputs and the engine's milliseconds plus the trip through this boundary."""
        slot = self._slot()
        started = time.perf_counter()
        reply = slot.run(np.ascontiguousarray(tensor))
        if reply is None:
            slot.close()
            raise EngineCrashed(self.host.died(self.engine, self.device))
        self._free.put(slot)
        if "error" in reply:
            raise _rebuilt(reply)
        trip_ms = (time.perf_counter() - started) * 1e3 - reply["wall_ms"]
        return slot.outputs_of(reply), reply["engine_ms"] + max(trip_ms, 0.0)

    def _slot(self) -> _Slot:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        if self.host.death is not None:
            raise EngineCrashed(self.host.death)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            try:
                self.host.send({"op": "slot", "id": self.number}, [theirs.fileno()])
            except OSError:
                ours.close()
                raise EngineCrashed(self.host.died(self.engine, self.device)) from None
        slot = _Slot(ours)
        with self._lock:
            self._slots.append(slot)
        return slot

    @property
    def alive(self) -> bool:
        return self.host.alive

    def kill(self, why: str) -> None:
        self.host.kill(why)

    def close(self) -> None:
        """Frees this model's slots and the model in its host; the host's last model closes the host."""
        with self._lock:
            slots, self._slots = self._slots, []
        for slot in slots:
            slot.close()
        if self.host.unload(self.number):
            _forget_host(self.host)
            self.host.close()


def _rebuilt(reply: dict[str, Any]) -> Exception:
    """The child's exception, raised here as the engine raised it: a BackendError keeps its type and words."""
    kind, message = reply.get("kind", "RuntimeError"), reply["error"]
    if kind in ("BackendError", "BackendRefused"):
        return BackendRefused(message) if kind == "BackendRefused" else BackendError(message)
    found = getattr(builtins, kind, None)
    if isinstance(found, type) and issubclass(found, Exception):
        return found(message)
    return RuntimeError(f"{kind}: {message}")


@dataclass
class IsolatedBackend(Backend):
    """A backend whose engine runs in a child process (see the module's docstring)."""

    child: ChildEngine | None = field(default=None, repr=False)
    lanes_offered: int = 1

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        return self.run_timed(tensor)[0]

    def run_timed(self, tensor: np.ndarray) -> tuple[list[np.ndarray], float]:
        assert self.child is not None
        return self.child.run(tensor)

    @property
    def lanes(self) -> int:
        return self.lanes_offered

    @property
    def alive(self) -> bool:
        return self.child is not None and self.child.alive

    def abandon(self, why: str) -> bool:
        if self.child is None:
            return False
        self.child.kill(why)
        return True

    def close(self) -> None:
        if self.child is not None:
            self.child.close()


def load_isolated(engine: str, path: Path, options: BackendOptions, host: str | None = None) -> IsolatedBackend:
    """The model loaded by `engine` in a child process: its own, or the one every model named `host` shares (a chip
    has one owner: a Hailo's VDevice, an Edge TPU)."""
    child = ChildEngine(engine, path, options, host)
    described = child.load()
    parallel, lanes = described.pop("parallel"), described.pop("lanes")
    backend = IsolatedBackend(**described, child=child, lanes_offered=lanes)
    object.__setattr__(backend, "parallel", parallel)  # the engine's own answer, where the class has a default
    return backend
