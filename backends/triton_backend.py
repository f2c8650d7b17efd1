"""Triton Inference Server (and any KServe v2 / Open Inference Protocol server): the network runs on a server,
capture, pre-processing, decoding, tracking and events stay here.

A model is named by its server: `triton://HOST:PORT/NAME[/VERSION]` over HTTP, `triton+grpc://HOST:PORT/NAME` over
gRPC (`triton+https://`, `triton+grpcs://` with TLS). Its tensors come from the server's own metadata and config,
so the decoder is chosen from the output layout as for a local file. The lanes of a shared engine are requests in
flight at once; the server's dynamic batcher batches them with other boxes' (triton_client.py says how each
protocol keeps them in flight). On the same host, inputs and outputs pass through system shared memory.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from edge_inference.backends.base import Backend, BackendError, BackendOptions, TensorInfo, brief
from edge_inference.backends.engine import BackendStatus, Engine, Offer, installed
from edge_inference.backends.options import EngineOptions, parse_options
from edge_inference.backends.triton_client import ServerClient, TritonReference, names_server, parse_reference
from edge_inference.backends.triton_http import answer_bound
from edge_inference.backends.triton_times import ServerTimes
from edge_inference.extras import install_extra

INSTALL = f"{install_extra('triton')} (NVIDIA's tritonclient, HTTP and gRPC)"
EXTRA = install_extra("triton")
DTYPES = {
    "FP32": np.float32,
    "FP16": np.float16,
    "FP64": np.float64,
    "UINT8": np.uint8,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "BOOL": np.bool_,
}


DEFAULT_TIMEOUT_S = 5.0


class TritonOptions(EngineOptions):
    timeout_s: float = Field(
        DEFAULT_TIMEOUT_S,
        gt=0,
        description="seconds a request (and connecting) may take before the server counts as away",
    )
    shared_memory: Literal["auto", "system", "off"] = Field(
        "auto",
        description="system: tensors pass through the host's shared memory (/dev/shm), no tensor bytes over the "
        "socket (the server on this host, sharing /dev/shm); auto: system where the server's address is this host's "
        "and it accepts the region, else off",
    )
    token: str | None = Field(None, description="sent as 'Authorization: Bearer TOKEN' (a server behind a proxy)")
    headers: dict[str, str] = Field(default_factory=dict, description="more headers sent with every request")
    ca_file: str | None = Field(None, description="CA certificates (PEM) for triton+https:// and triton+grpcs://")

    @field_validator("shared_memory", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        """YAML reads `off` as false (and `on` as true), in a config and in --engine-option alike."""
        return {False: "off", True: "system"}.get(value, value) if isinstance(value, bool) else value


def reference_of(path: Path | str) -> TritonReference:
    reference = parse_reference(str(path))
    if reference is None:
        raise BackendError(
            f"{path} is not a Triton model reference: write triton://HOST:PORT/MODEL (HTTP) or "
            "triton+grpc://HOST:PORT/MODEL (gRPC); the server's model repository is written by "
            "`edge models export-triton MODEL DIR`"
        )
    return reference


# what tritonclient, gRPC, gevent and the resolver say of a server that cannot be reached
UNREACHABLE = ("unavailable", "connection refused", "failed to connect", "errno 111", "name or service not known")


def server_error(reference: TritonReference, exc: BaseException) -> BackendError:
    """A failed call to the server in one line that says what to do."""
    text = brief(str(exc) or type(exc).__name__, 300)
    lowered = text.lower()
    where = f"the Triton server at {reference.address} ({reference.protocol.upper()})"
    if any(s in lowered for s in UNREACHABLE):
        return BackendError(f"{where} does not answer ({text}): is tritonserver running and the address right?")
    if any(s in lowered for s in ("deadline", "timed out", "timeout")):
        return BackendError(
            f"{where} took longer than timeout_s to answer the request for {reference.model} ({text}): a busy or "
            "stuck server"
        )
    if "unknown model" in lowered or "not found" in lowered or "not ready" in lowered:
        return not_ready(reference, f" ({text})")
    if "unauthenticated" in lowered or "401" in lowered or "403" in lowered:
        return BackendError(f"{where} refused the request ({text}): set engine option triton.token or headers")
    return BackendError(f"{where} failed the request for {reference.model}: {text}")


def not_ready(reference: TritonReference, detail: str = "") -> BackendError:
    return BackendError(
        f"the Triton server at {reference.address} has no model {reference.model!r} ready{detail}: not in its "
        "repository, not loaded, or still loading; check the name and the server's log"
    )


def _dims(values: list[Any]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)  # gRPC's JSON writes int64 as strings


def _tensor(entry: dict[str, Any], batching: bool) -> TensorInfo:
    """A tensor of the server's metadata as one request of one frame sees it: a batching model's -1 batch is 1."""
    dtype = DTYPES.get(entry["datatype"])
    if dtype is None:
        raise BackendError(f"tensor {entry['name']} is {entry['datatype']}, which no decoder here reads")
    shape = _dims(entry["shape"])
    if batching and shape[:1] == (-1,):
        shape = (1, *shape[1:])
    return TensorInfo(entry["name"], shape, np.dtype(dtype))


def _parameters(config: dict[str, Any]) -> dict[str, str]:
    """The model config's string parameters, read as a file's metadata (export-triton writes the ONNX file's own
    metadata there: an Ultralytics export's class names and input size)."""
    found = {}
    for key, value in (config.get("parameters") or {}).items():
        text = value.get("string_value") if isinstance(value, dict) else None
        if text is not None:
            found[key] = str(text)
    return found


_regions = itertools.count()


def _box() -> str:
    """This machine, in 8 hex digits: the server holds regions of many boxes, whose process ids may coincide."""
    import hashlib
    import socket

    machine = Path("/etc/machine-id")
    identity = machine.read_text().strip() if machine.is_file() else socket.gethostname()
    return hashlib.sha256(identity.encode()).hexdigest()[:8]


REGION_PREFIX = f"edge-{_box()}-"  # then the process id and the lane: a region of a dead process is found by it


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def stale_regions(names: list[str]) -> list[str]:
    """The regions this machine's processes registered that are no longer alive (a box SIGKILLed or unplugged)."""
    stale = []
    for name in names:
        pid = name.removeprefix(REGION_PREFIX).split("-", 1)[0]
        if name.startswith(REGION_PREFIX) and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            stale.append(name)
    return stale


@dataclass
class _Lane:
    """A calling thread's shared memory: one region for the input, one for every output back to back."""

    names: tuple[str, str]
    handles: tuple[Any, Any]
    sizes: tuple[int, int]  # kept here: tritonclient's handle holds its size only privately, and only from 2.52
    registered: bool = False


@dataclass
class TritonBackend(Backend):
    server: Any = None  # ServerClient
    memory: str = "off"  # system or off: how the tensors travel
    extensions: frozenset[str] | None = None  # the server's, as its metadata names them; None: unknown, all tried
    times: ServerTimes = field(default_factory=ServerTimes)
    parallel = "shared"  # every lane a request in flight on the one connection (gRPC) or pool (HTTP)

    def __post_init__(self) -> None:
        self._local = threading.local()
        self._lanes: list[_Lane] = []
        self._lock = threading.Lock()
        self._out_bytes = [int(np.prod(t.shape)) * t.dtype.itemsize for t in self.outputs]
        # binary where the server names the extension; else its answer may come as JSON text, several times larger
        binary = self.reference.protocol == "grpc" or "binary_tensor_data" in (self.extensions or ())
        self._answer_bound = answer_bound(self.outputs, binary)
        self.server.bound_answers(self._answer_bound)

    @property
    def reference(self) -> TritonReference:
        return self.server.reference

    def offers(self, extension: str) -> bool:
        return self.extensions is None or extension in self.extensions

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        failure: BackendError | None = None
        try:
            with self.times.request():
                outputs = self._shared(tensor) if self.memory == "system" else self._sent(tensor)
        except BackendError as exc:
            failure = exc.with_traceback(None)
        except Exception as exc:  # noqa: BLE001 - tritonclient's errors and the network's, said in one line
            if self.memory == "system" and "shared memory" in str(exc).lower():
                self._lane().registered = False  # a restarted server forgot the regions: registered again
            failure = server_error(self.reference, exc)
        if failure is not None:
            # raised here, out of the handler: no context or traceback into the request's frames, whose 2 MB
            # bodies an error kept alive (80 MB while a server kept failing, until the garbage collector ran)
            raise failure
        if self.offers("statistics"):
            self.times.poll(self.server)
        return outputs

    def _sent(self, tensor: np.ndarray) -> list[np.ndarray]:
        module, binary = self.server.module, {}
        if self.reference.protocol == "http":  # Triton's binary tensors, or the protocol's JSON where not offered
            binary = {"binary_data": self.offers("binary_tensor_data")}
        request = module.InferInput(self.inputs[0].name, list(tensor.shape), _triton_type(tensor.dtype))
        request.set_data_from_numpy(np.ascontiguousarray(tensor), **binary)
        wanted = [module.InferRequestedOutput(t.name, **binary) for t in self.outputs]
        result = self.server.infer([request], wanted, self._answer_bound)
        read = _grpc_output if self.reference.protocol == "grpc" else _http_output
        return [self._checked(t, read(result, t.name)) for t in self.outputs]

    def _checked(self, declared: TensorInfo, found: np.ndarray | None) -> np.ndarray:
        """An output as the model's metadata declared it, or one line naming the server, the model and what was
        wrong: a missing, mis-typed or mis-shaped output would otherwise fail in a decoder with a Python message,
        and NaN or Inf would reach JSON as `Infinity`, which a browser's JSON.parse refuses."""
        where = f"the server at {self.reference.address} answered {self.reference.model}"
        if found is None:
            raise BackendError(f"{where} without its output {declared.name}: a server or model that is not this one")
        if found.dtype != declared.dtype:
            raise BackendError(
                f"{where} with {declared.name} as {found.dtype} where its metadata declares {declared.dtype}"
            )
        shape_fits = len(found.shape) == len(declared.shape) and all(
            want < 0 or want == have for want, have in zip(declared.shape, found.shape, strict=True)
        )
        if not shape_fits:
            raise BackendError(
                f"{where} with {declared.name} of shape {list(found.shape)} where its metadata declares "
                f"{list(declared.shape)}"
            )
        if found.dtype.kind == "f" and not np.isfinite(found).all():
            raise BackendError(f"{where} with NaN or Inf in {declared.name}: the model on the server is broken")
        return found

    def _shared(self, tensor: np.ndarray) -> list[np.ndarray]:
        from tritonclient.utils import shared_memory as shm

        lane = self._lane()
        if not lane.registered:
            self._register(lane)
        shm.set_shared_memory_region(lane.handles[0], [np.ascontiguousarray(tensor)])
        module = self.server.module
        request = module.InferInput(self.inputs[0].name, list(tensor.shape), _triton_type(tensor.dtype))
        request.set_shared_memory(lane.names[0], tensor.nbytes)
        wanted, offset = [], 0
        for info, size in zip(self.outputs, self._out_bytes, strict=True):
            output = module.InferRequestedOutput(info.name)
            output.set_shared_memory(lane.names[1], size, offset)
            wanted.append(output)
            offset += size
        self.server.infer([request], wanted, self._answer_bound)
        found, offset = [], 0
        for info, size in zip(self.outputs, self._out_bytes, strict=True):
            # a copy: the region is this lane's next frame's
            copied = np.array(shm.get_contents_as_numpy(lane.handles[1], info.dtype, info.shape, offset))
            found.append(self._checked(info, copied))
            offset += size
        return found

    def _lane(self) -> _Lane:
        lane: _Lane | None = getattr(self._local, "lane", None)
        if lane is None:
            from tritonclient.utils import shared_memory as shm

            number = next(_regions)
            names = (f"{REGION_PREFIX}{os.getpid()}-{number}-in", f"{REGION_PREFIX}{os.getpid()}-{number}-out")
            sizes = (int(np.prod(self.inputs[0].shape)) * self.inputs[0].dtype.itemsize, sum(self._out_bytes))
            handles = tuple(shm.create_shared_memory_region(n, "/" + n, s) for n, s in zip(names, sizes, strict=True))
            lane = self._local.lane = _Lane(names, (handles[0], handles[1]), (sizes[0], sizes[1]))
            with self._lock:
                self._lanes.append(lane)
        return lane

    def _register(self, lane: _Lane) -> None:
        """Both of a lane's regions, or neither: an input region registered before the output's was refused stayed
        on the server, as nothing marked it registered to unregister (seen as a stray `-in` region)."""
        done: list[str] = []
        for name, size in zip(lane.names, lane.sizes, strict=True):
            try:
                self.server.register_memory(name, "/" + name, size)
            except Exception as exc:
                # the name holds this process's id and lane: a region the server already has under it is this one
                if "already" not in str(exc).lower():
                    for registered in done:
                        with contextlib.suppress(Exception):
                            self.server.unregister_memory(registered)
                    raise
            done.append(name)
        lane.registered = True

    def timing_split(self) -> dict[str, float] | None:
        return self.times.last

    def release_lane(self) -> None:
        """This thread's regions given back: the loading thread's, made to see whether the server takes them, would
        otherwise stay registered for a thread that never runs a frame."""
        lane = getattr(self._local, "lane", None)
        if lane is not None:
            self._local.lane = None
            with self._lock:
                self._lanes.remove(lane)
            self._free(lane)

    def _free(self, lane: _Lane) -> None:
        from tritonclient.utils import shared_memory as shm

        for name, handle in zip(lane.names, lane.handles, strict=True):
            if lane.registered:
                with contextlib.suppress(Exception):  # a server gone forgot the region with it
                    self.server.unregister_memory(name)
            shm.destroy_shared_memory_region(handle)

    def close(self) -> None:
        with self._lock:
            lanes, self._lanes = self._lanes, []
        for lane in lanes:
            self._free(lane)
        self.times.close()
        self.server.close()


TRITON_TYPES = {np.dtype(known): name for name, known in DTYPES.items()}
# where a gRPC answer without raw contents holds each type's values (the protocol's InferTensorContents)
TYPED_CONTENTS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
}  # fmt: skip


def _http_output(result: Any, name: str) -> np.ndarray | None:
    found: np.ndarray | None = result.as_numpy(name)
    return found


def _grpc_output(result: Any, name: str) -> np.ndarray | None:
    """An output of a gRPC answer: its raw contents (Triton, MLServer), or the typed contents the protocol allows
    instead (KServe's model server), which tritonclient's `as_numpy` reads as empty."""
    answer = result.get_response()
    if answer.raw_output_contents:
        return _http_output(result, name)  # the same reading as HTTP's: tritonclient's
    for output in answer.outputs:
        if output.name == name:
            field = TYPED_CONTENTS.get(output.datatype)
            if field is None or output.datatype not in DTYPES:
                return np.empty(0, object)  # BYTES or a type no decoder reads: said by the check as a wrong type
            values: np.ndarray = np.asarray(getattr(output.contents, field), DTYPES[output.datatype])
            return values.reshape([int(d) for d in output.shape])
    return None


def _triton_type(dtype: np.dtype) -> str:
    name = TRITON_TYPES.get(dtype)
    if name is None:
        raise BackendError(f"Triton takes no {dtype} tensors")
    return name


def _config_if_offered(server: ServerClient) -> dict[str, Any]:
    """The model's configuration where the server has one: `/v2/models/NAME/config` is Triton's extension, not the
    Open Inference Protocol's (MLServer, KServe's model server answer 404), so a server without it is taken on its
    metadata alone."""
    try:
        return server.config()
    except Exception:  # noqa: BLE001 - tritonclient's 404 is a parse error of the server's answer
        return {}


def _check_model(metadata: dict[str, Any], config: dict[str, Any], reference: TritonReference) -> bool:
    """Whether the server batches the model (Triton's max_batch_size; without a config, a first dimension of -1 in
    the metadata, as a batching model declares it); one line for a model no decoder here fits."""
    if len(metadata.get("inputs", [])) != 1:
        names = ", ".join(i["name"] for i in metadata.get("inputs", []))
        raise BackendError(
            f"{reference.model} on {reference.address} takes inputs {names}: a detector here feeds one image input"
        )
    if "max_batch_size" in config:
        return int(config.get("max_batch_size", 0) or 0) > 0
    return _dims(metadata["inputs"][0]["shape"])[:1] == (-1,)


def load(path: Path, options: BackendOptions) -> TritonBackend:
    if not installed("tritonclient"):
        raise BackendError(f"the triton engine needs NVIDIA's tritonclient: {EXTRA}")
    reference = reference_of(path)
    settings = parse_options("triton", TritonOptions, options.engine_options)
    headers = dict(settings.headers)
    if settings.token:
        headers["Authorization"] = f"Bearer {settings.token}"
    server = ServerClient(reference, settings.timeout_s, headers, settings.ca_file)
    try:
        if not server.model_ready():
            raise not_ready(reference)
        metadata = server.metadata()
    except BackendError:
        server.close()
        raise
    except Exception as exc:  # noqa: BLE001 - said in one line
        server.close()
        raise server_error(reference, exc) from None
    extensions = server.extensions()
    config = _config_if_offered(server) if extensions is None or "model_configuration" in extensions else {}
    batching = _check_model(metadata, config, reference)
    version = _client_version()
    backend = TritonBackend(
        key="triton",
        model_path=reference.url,
        engine=f"tritonclient {version} ({reference.protocol})",
        device=f"{metadata.get('platform') or config.get('backend') or 'server'} on {reference.address}",
        inputs=[_tensor(t, batching) for t in metadata["inputs"]],
        outputs=[_tensor(t, batching) for t in metadata["outputs"]],
        metadata=_parameters(config),
        server=server,
        extensions=None if extensions is None else frozenset(extensions),
    )
    backend.memory = _settle_memory(backend, settings.shared_memory)
    return backend


def _settle_memory(backend: TritonBackend, asked: str) -> str:
    """System shared memory where asked for, or by default for a server on this host, and the server takes it;
    auto falls back to the socket, saying why."""
    if asked == "off" or (asked == "auto" and not backend.reference.on_this_host):
        return "off"
    if not backend.offers("system_shared_memory"):
        if asked == "system":
            backend.close()
            raise BackendError(
                f"the server at {backend.reference.address} offers no system shared memory (Triton's extension, not "
                "the protocol's): set triton.shared_memory: off"
            )
        backend.notes.append("tensors go over the socket: the server offers no shared memory (Triton's extension)")
        return "off"
    if any(d < 0 for t in [*backend.inputs, *backend.outputs] for d in t.shape):
        # a region is sized before the request: an output whose size the model decides per frame cannot have one
        backend.notes.append(
            "tensors go over the socket: the model's outputs vary in size, shared memory needs them fixed"
        )
        return "off"
    backend.memory = "system"
    dropped = _drop_stale_regions(backend.server)
    if dropped:
        backend.notes.append(
            f"dropped {dropped} shared-memory regions that a run of this box which ended without closing left "
            "registered on the server"
        )
    try:
        backend._register(backend._lane())
        backend.release_lane()  # taken: each lane's thread makes its own at its first frame
    except Exception as exc:  # noqa: BLE001 - a server in a container without the host's /dev/shm refuses it
        if asked == "system":
            backend.close()
            raise BackendError(
                f"the Triton server at {backend.reference.address} refused system shared memory ({brief(str(exc), 200)}"
                "): run it on this host sharing /dev/shm (docker run --ipc=host), or set triton.shared_memory: off"
            ) from None
        backend.release_lane()
        backend.notes.append(
            f"shared memory not taken by the server ({brief(str(exc), 120)}): tensors go over the socket"
        )
        return "off"
    backend.notes.append("tensors pass through system shared memory (the server is on this host)")
    return "system"


def _drop_stale_regions(server: ServerClient) -> int:
    """Unregisters what a dead process of this machine left on the server (Triton keeps a region's mapping until it
    restarts) and removes its file from /dev/shm; how many were dropped. A server without the API: none."""
    try:
        stale = stale_regions(server.registered_memory())
    except Exception:  # noqa: BLE001 - not offered, or not to this client: registering says what matters
        return 0
    for name in stale:
        with contextlib.suppress(Exception):
            server.unregister_memory(name)
        with contextlib.suppress(OSError):
            Path("/dev/shm", name).unlink()  # noqa: S108 - POSIX shared memory on Linux; the name is ours
    return len(stale)


def _client_version() -> str:
    from importlib.metadata import version

    return version("tritonclient")


def probe() -> BackendStatus:
    status = ENGINE.status()
    if not installed("tritonclient"):
        status.problem = "tritonclient is not installed"
        return status
    status.available, status.engine = True, f"tritonclient {_client_version()}"
    status.devices = ["a Triton (KServe v2) server: --model triton://HOST:PORT/MODEL or triton+grpc://..."]
    return status


def reach(model: str) -> str:
    """Whether the server a reference names answers and has the model ready, in one line."""
    if not installed("tritonclient"):
        raise BackendError(f"the triton engine needs NVIDIA's tritonclient: {EXTRA}")
    reference = reference_of(model)
    server = ServerClient(reference, DEFAULT_TIMEOUT_S, {}, None)
    try:
        if not server.model_ready():
            raise not_ready(reference)
        metadata = server.metadata()
    except BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 - said in one line
        raise server_error(reference, exc) from None
    finally:
        server.close()
    inputs = ", ".join(f"{t['name']} {t['datatype']} {t['shape']}" for t in metadata.get("inputs", []))
    return f"answers over {reference.protocol.upper()}: {reference.model} ready ({metadata.get('platform')}; {inputs})"


def serves(model: str) -> bool:
    return names_server(model)


def rank(path: Path) -> Offer | None:
    """Only for a server's reference: a file is never sent to a server unasked."""
    reference = parse_reference(str(path))
    if reference is None or not installed("tritonclient"):
        return None
    return Offer(100, "server", f"the model is served by the Triton server at {reference.address}")


ENGINE = Engine(
    key="triton",
    formats=(),
    install=INSTALL,
    probe=probe,
    load=load,
    rank=rank,
    listed=6,
    distributions=("tritonclient",),
    options=TritonOptions,
    serves=serves,
    reach=reach,
)
