"""ONNX Runtime: CPU, CUDA, TensorRT and OpenVINO execution providers, verified after the session is created.

Providers follow ONNX Runtime's TensorRT EP documentation: `--device tensorrt` asks for [TensorRT, CUDA, CPU], so the
nodes TensorRT cannot take run on the GPU through CUDA rather than on the CPU with copies, with FP16 and the engine and
timing caches on (without the caches TensorRT rebuilds its engine at every start, reload and `auto` measurement:
minutes on a Jetson). The caches live in `tensorrt/` under the model cache folder. `--device openvino:GPU` passes
`device_type` to the OpenVINO EP (CPU when none is named).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from edge_inference.backends.base import Backend, BackendError, BackendOptions, TensorInfo, unreadable_model
from edge_inference.backends.cuda_libraries import cuda_libraries_problem, missing_cuda_libraries
from edge_inference.backends.engine import BackendStatus, Engine, Offer, installed
from edge_inference.backends.hardware import nvidia_gpus
from edge_inference.backends.held_stderr import held_stderr, this_threads_stdout
from edge_inference.backends.options import EngineOptions, parse_options

PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}
INSTALL_HINTS = {
    "cuda": "install onnxruntime-gpu in place of onnxruntime (pip uninstall onnxruntime, then pip install "
    "'edge-inference[cuda]', which brings NVIDIA's CUDA and cuDNN wheels) on a machine with an NVIDIA GPU",
    "tensorrt": "install onnxruntime-gpu and TensorRT 10 (on a Jetson: JetPack's onnxruntime-gpu wheel)",
    "openvino": "install onnxruntime-openvino in place of onnxruntime",
}
_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
}


OPENVINO_DEVICE_TYPES = ("CPU", "GPU", "NPU", "AUTO", "HETERO", "MULTI")
TENSORRT_CACHE = "tensorrt"  # under the cache folder the loader passes (the model cache)


class OnnxRuntimeOptions(EngineOptions):
    trt_fp16: bool = Field(True, description="TensorRT: build FP16 engines (FP32 when off; most of a Jetson's gain)")
    trt_engine_cache: bool = Field(
        True, description="TensorRT: keep built engines, so a start, a reload or an auto measurement does not rebuild"
    )
    trt_timing_cache: bool = Field(True, description="TensorRT: keep layer timings, so new engines build faster")
    trt_cache_dir: str | None = Field(None, description="TensorRT caches' folder (default: tensorrt/, model cache)")
    cuda_conv_search: Literal["exhaustive", "heuristic", "default"] = Field(
        "exhaustive",
        description="CUDA: how cuDNN picks each convolution's algorithm at the first inference. exhaustive (ONNX "
        "Runtime's default) times them all; heuristic asks cuDNN, halving the first inference on an H100 (1.8 "
        "against 3.6 s: one photo with `edge detect`) at no clear cost after it; default: one fixed algorithm",
    )
    spinning: Literal["auto", "on", "runs", "off"] = Field(
        "auto",
        description="CPU threads spin-wait for work between operators: quicker hand-offs, but a core kept busy "
        "while waiting. on: also between inferences (a camera pays 3.3x the CPU per frame); runs: during an "
        "inference only, stopped when it returns; auto: off (a detect loop measures its threads instead)",
    )


def parse_device(device: str) -> tuple[str, str]:
    """'cuda:1' -> ('cuda', '1'); 'CPU' -> ('cpu', '0'); 'openvino:gpu' -> ('openvino', 'GPU')."""
    name, _, detail = device.partition(":")
    name = name.lower()
    name = "cpu" if name == "auto" else name
    if name not in PROVIDERS:
        raise BackendError(f"ONNX Runtime has no device {device!r}; choose one of: {', '.join(PROVIDERS)}")
    if name == "openvino":
        device_type = detail.upper() or "CPU"
        if device_type.partition(":")[0].split(".")[0] not in OPENVINO_DEVICE_TYPES:
            raise BackendError(f"OpenVINO EP device {detail!r} unknown: e.g. openvino:CPU, openvino:GPU, openvino:NPU")
        return name, device_type
    if detail and not detail.isdigit():
        raise BackendError(f"device index in {device!r} must be a number, e.g. cuda:0")
    return name, detail or "0"


def model_digest(path: Path) -> str:
    """The model's content, in 16 hex digits: what its TensorRT engines are kept under. Its external data (weights
    kept beside the graph, `model.onnx.data`) counts too: new weights under the same graph are a new engine."""
    digest = hashlib.sha256()
    for part in [path, *external_data_files(path)]:
        digest.update(part.name.encode() + b"\0")
        with open(part, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def external_data_files(path: Path) -> list[Path]:
    """The files beside an ONNX model that it names as external data. A tensor's `location` is stored in the graph
    as its plain bytes, so a file of the model's folder whose name the graph holds is read as one, without parsing
    the graph (onnx is not in the basic install); a false match only makes the key stricter."""
    graph = path.read_bytes()
    if b"location" not in graph:  # every external tensor's entry has the key "location"
        return []
    found = [p for p in sorted(path.parent.iterdir()) if p != path and p.is_file() and p.name.encode() in graph]
    return found


def tensorrt_options(
    device_id: str, settings: OnnxRuntimeOptions, cache_dir: Path | None, model: Path | None = None
) -> dict[str, Any]:
    """The TensorRT EP's provider options (names from ONNX Runtime's TensorRT EP documentation). Engines are kept
    in a folder per model content: ONNX Runtime names a cached engine by the model's file name, tensor names and
    versions, not its weights (`TRTGenerateId`), so a retrained `best.onnx` silently ran the old engine. The timing
    cache, which holds layer timings and no weights, stays shared."""
    options: dict[str, Any] = {"device_id": int(device_id), "trt_fp16_enable": settings.trt_fp16}
    folder = cache_dir / TENSORRT_CACHE if cache_dir else None
    folder = Path(settings.trt_cache_dir) if settings.trt_cache_dir else folder
    if folder is None or not (settings.trt_engine_cache or settings.trt_timing_cache):
        return options
    folder.mkdir(parents=True, exist_ok=True)
    if settings.trt_engine_cache:
        engines = folder / f"engines-{model_digest(model)}" if model is not None else folder
        engines.mkdir(parents=True, exist_ok=True)
        options |= {"trt_engine_cache_enable": True, "trt_engine_cache_path": str(engines)}
    if settings.trt_timing_cache:
        options |= {"trt_timing_cache_enable": True, "trt_timing_cache_path": str(folder)}
    return options


def cuda_options(device_id: str, settings: OnnxRuntimeOptions) -> dict[str, Any]:
    """The CUDA EP's provider options (ONNX Runtime's CUDA EP documentation); its own defaults are not repeated."""
    options: dict[str, Any] = {"device_id": int(device_id)}
    if settings.cuda_conv_search != "exhaustive":
        options["cudnn_conv_algo_search"] = settings.cuda_conv_search.upper()
    return options


def spinning(setting: str) -> str:
    """When the CPU threads spin-wait: "on" (always), "runs" (during an inference, stopped when it returns), "off".
    A thread spinning between inferences burns its core until the next frame: a camera at 10 fps paid 3.3x the CPU
    per frame, and a small board shares its cores with decoding and the service. Within one inference the hand-offs
    between operators are quicker, which paid in a back-to-back loop on an idle machine (1.27x the fps on
    yolox-nano) and cost it twice the CPU for less fps as soon as anything else ran (issue 62). So `auto` never
    spins: a loop measures whether a second thread pays instead (edge/detection/threads.py, `LoopThreads`)."""
    return "off" if setting == "auto" else setting


def _tensor_info(arg: Any) -> TensorInfo:
    shape = tuple(d if isinstance(d, int) and d > 0 else -1 for d in arg.shape)
    return TensorInfo(arg.name, shape, np.dtype(_DTYPES.get(arg.type, np.float32)))


@dataclass
class OnnxRuntimeBackend(Backend):
    session: Any = None
    parallel = "shared"  # InferenceSession.run is thread-safe

    def run(self, tensor: np.ndarray) -> list[np.ndarray]:
        result: list[np.ndarray] = self.session.run(None, {self.inputs[0].name: tensor})
        return result


def _providers(
    ort: Any,
    name: str,
    detail: str,
    options: BackendOptions,
    settings: OnnxRuntimeOptions,
    notes: list[str],
    model: Path | None = None,
) -> list[Any]:
    """The providers to ask for: the wanted one first when this ONNX Runtime has it, else the CPU (if allowed)."""
    wanted = PROVIDERS[name]
    available = ort.get_available_providers()
    if name == "cpu":
        return ["CPUExecutionProvider"]
    missing = missing_cuda_libraries() if name in ("cuda", "tensorrt") else ()
    if wanted not in available or missing:
        message = (
            cuda_libraries_problem(ort, missing)
            if missing and wanted in available
            else f"ONNX Runtime {ort.__version__} here has no {wanted} (available: {', '.join(available)}). "
            f"To use it, {INSTALL_HINTS[name]}"
        )
        if not options.allow_fallback:
            raise BackendError(f"{message}; or pass --fallback to run on the CPU instead.")
        notes.append(f"{wanted} unavailable, running on CPUExecutionProvider (fallback requested)")
        return ["CPUExecutionProvider"]
    if name == "openvino":
        return [(wanted, {"device_type": detail}), "CPUExecutionProvider"]
    cuda = ("CUDAExecutionProvider", cuda_options(detail, settings))
    if name == "cuda":
        return [cuda, "CPUExecutionProvider"]
    try:
        trt = (wanted, tensorrt_options(detail, settings, options.cache_dir, model))
    except OSError as exc:  # a cache folder that cannot be made: run, rebuilding the engine each time, and say so
        notes.append(f"TensorRT caches off (the engine is rebuilt at every load): {exc}")
        uncached = settings.model_copy(update={"trt_engine_cache": False, "trt_timing_cache": False})
        trt = (wanted, tensorrt_options(detail, uncached, None))
    # the CUDA EP takes the nodes TensorRT cannot, on the GPU (ONNX Runtime's TensorRT EP documentation)
    return [trt, *([cuda] if "CUDAExecutionProvider" in available else []), "CPUExecutionProvider"]


# ONNX Runtime's own log line for a provider library that does not load (provider_bridge_ort.cc), e.g.
# "Failed to load library .../libonnxruntime_providers_cuda.so with error: libcudnn.so.9: cannot open shared ..."
_ENGINE_LOG_LINE = re.compile(
    rb"^(?:\x1b\[[0-9;]*m)?\d{4}-\d\d-\d\d [^\n]*\[[EW]:onnxruntime:[^\n]*\n(?:\x1b\[m\n)?", re.MULTILINE
)
_LOAD_ERROR = re.compile(r"with error: ([^\n\x1b]+)")
# ONNX Runtime before 1.23 ignores `enable_fallback=0`: its Python layer prints this on stdout and retries on its
# fallback providers (onnxruntime_inference_collection.py, InferenceSession.__init__)
_FALLBACK_BANNER = re.compile(r"^EP Error (.*) when using \[", re.MULTILINE)
_SOURCE_POSITION = re.compile(r"^/\S+:\d+ [^(]*\([^)]*\) ")  # "/onnxruntime_src/...cc:729 void f(A&, B&) "


def _auto_device(ort: Any, notes: list[str]) -> tuple[str, str]:
    """`--device auto`, the default: CUDA where this ONNX Runtime has it and its libraries and the NVIDIA driver
    are here (on an H100, 0.08x the CPU per frame of 16 CPU cores at 3.4x the fps), else the CPU."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "cpu", "0"
    missing = missing_cuda_libraries()
    if missing:
        notes.append(f"--device auto: on the CPU, as {cuda_libraries_problem(ort, missing)}")
        return "cpu", "0"
    return "cuda", "0"


def _session_options(ort: Any, options: BackendOptions, settings: OnnxRuntimeOptions) -> Any:
    session_options = ort.SessionOptions()
    session_options.log_severity_level = 3  # the engine's own warnings are not the user's problem
    if options.threads:
        session_options.intra_op_num_threads = options.threads
    spin = spinning(settings.spinning)
    if spin == "off":
        # ONNX Runtime's documented session options; a waiting thread sleeps instead of keeping its core busy
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session_options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    elif spin == "runs":  # its threads stop spinning as soon as the last Run() in progress returns
        session_options.add_session_config_entry("session.force_spinning_stop", "1")
    return session_options


def _name_of(provider: Any) -> str:
    return str(provider[0] if isinstance(provider, tuple) else provider)


def _engine_error(exc: Exception) -> str:
    """The first line of an ONNX Runtime error, without the C++ source position it begins with."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return _SOURCE_POSITION.sub("", text)[:300]


def _gpu_session(ort: Any, path: Path, session_options: Any, providers: list[Any]) -> tuple[Any, str]:
    """A session on a provider that may fail to start, and why it did not. A provider whose library does not load is
    logged by ONNX Runtime on stderr and skipped (that log is taken off stderr for the reason); one that raises is
    tried without, then the CPU alone. ONNX Runtime's Python fallback is off: it prints a banner on stdout."""
    said: list[str] = []

    def take_engine_log(held: bytes) -> bytes:
        said.extend(line.decode(errors="replace") for line in _ENGINE_LOG_LINE.findall(held))
        return _ENGINE_LOG_LINE.sub(b"", held)

    failure = ""
    for attempt in [providers, *([providers[1:]] if len(providers) > 2 else []), ["CPUExecutionProvider"]]:
        # TensorRT builds its engine while the session is made (minutes on a Jetson): stderr is not held that long,
        # the service's own log goes on meanwhile; its missing libraries come as an exception, not a log line
        building = any(_name_of(p) == PROVIDERS["tensorrt"] for p in attempt)
        printed = io.StringIO()  # an old ONNX Runtime's fallback banner: never in `edge detect --json`'s answer
        try:
            with (
                contextlib.nullcontext() if building else held_stderr(take_engine_log),
                this_threads_stdout(printed),
            ):
                session = ort.InferenceSession(
                    str(path), sess_options=session_options, providers=attempt, enable_fallback=0
                )
        except Exception as exc:  # noqa: BLE001 - the provider's or the model's: the CPU tells them apart
            if attempt == ["CPUExecutionProvider"]:
                raise unreadable_model(path, "an ONNX", _engine_error(exc)) from None
            failure = failure or _engine_error(exc)
            continue
        if banner := _FALLBACK_BANNER.search(printed.getvalue()):  # it fell back by itself: its reason is this
            failure = failure or _engine_error(RuntimeError(banner.group(1)))
        logged = [m.group(1).strip() for line in said if (m := _LOAD_ERROR.search(line))]
        return session, failure or (logged[0] if logged else "its libraries failed to load")
    raise AssertionError("unreachable: the CPU attempt returns or raises")


def load(path: Path, options: BackendOptions) -> OnnxRuntimeBackend:
    try:
        import onnxruntime as ort
    except ImportError:
        raise BackendError("ONNX Runtime is not installed: pip install onnxruntime") from None

    settings = parse_options("onnx", OnnxRuntimeOptions, options.engine_options)
    notes: list[str] = []
    chosen = options.device.lower() == "auto"
    name, detail = _auto_device(ort, notes) if chosen else parse_device(options.device)
    wanted = PROVIDERS[name]
    providers = _providers(ort, name, detail, options, settings, notes, path)
    session_options = _session_options(ort, options, settings)
    reason = ""
    if providers == ["CPUExecutionProvider"]:
        try:
            session = ort.InferenceSession(str(path), sess_options=session_options, providers=providers)
        except Exception as exc:  # noqa: BLE001 - ORT raises several private types for unreadable models
            raise unreadable_model(path, "an ONNX", _engine_error(exc)) from None
    else:
        session, reason = _gpu_session(ort, path, session_options, providers)

    active = session.get_providers()[0]
    if name != "cpu" and active != wanted and not notes:
        # ORT drops a provider whose libraries fail to load and runs on the next one: say so, and why
        message = f"ONNX Runtime could not start {wanted} ({reason}) and would run on {active}"
        if chosen:  # nobody asked for CUDA: the CPU is what `auto` is left with
            notes.append(f"--device auto: {message}; running there")
        elif not options.allow_fallback:
            raise BackendError(f"{message}. Check the CUDA/cuDNN/TensorRT installation, or pass --fallback.")
        else:
            notes.append(f"{message}; running there (fallback requested)")

    meta = session.get_modelmeta()
    return OnnxRuntimeBackend(
        key="onnx",
        model_path=str(path),
        engine=f"onnxruntime {ort.__version__}",
        device=active if name == "cpu" or active != wanted else f"{active}:{detail}",
        inputs=[_tensor_info(i) for i in session.get_inputs()],
        outputs=[_tensor_info(o) for o in session.get_outputs()],
        metadata=dict(meta.custom_metadata_map),
        notes=notes,
        session=session,
    )


def probe() -> BackendStatus:
    status = ENGINE.status()
    if not installed("onnxruntime"):
        status.problem = "onnxruntime is not installed"
        return status
    import onnxruntime as ort

    providers = ort.get_available_providers()
    status.available, status.engine = True, f"onnxruntime {ort.__version__}"
    status.devices = ["cpu"]
    gpus = nvidia_gpus()
    missing = missing_cuda_libraries() if "CUDAExecutionProvider" in providers else ()
    if missing:  # a GPU build that cannot start its CUDA providers here
        status.problem = cuda_libraries_problem(ort, missing)
        providers = [p for p in providers if p not in ("CUDAExecutionProvider", "TensorrtExecutionProvider")]
    if "CUDAExecutionProvider" in providers:
        status.devices += gpus or ["cuda:0"]
    if "TensorrtExecutionProvider" in providers:
        status.devices.append("tensorrt")
    if "OpenVINOExecutionProvider" in providers:
        status.devices.append("openvino")
    if gpus and "CUDAExecutionProvider" not in providers and not missing:
        status.problem = f"NVIDIA GPU present ({gpus[0]}) but this onnxruntime has no CUDA provider: {ENGINE.install}"
    return status


def ships_cuda() -> bool:
    """This onnxruntime has a CUDA provider library (onnxruntime-gpu, a Jetson's wheel), read from its files without
    importing it: ranking the engines for `--backend auto` then leaves the CPU wheel out of memory (+21 MiB) where
    the pick is another engine (issue 62)."""
    spec = importlib.util.find_spec("onnxruntime")
    folders = spec.submodule_search_locations if spec is not None else None
    return any(any((Path(folder) / "capi").glob("libonnxruntime_providers_cuda*")) for folder in folders or [])


def rank(path: Path) -> Offer | None:
    if not ENGINE.reads(path.name) or not installed("onnxruntime"):
        return None
    cuda = next((d.split()[0] for d in probe().devices if d.startswith("cuda")), None) if ships_cuda() else None
    if cuda:
        return Offer(90, cuda, "ONNX model, ONNX Runtime has CUDA and a GPU is present")
    return Offer(50, "cpu", "ONNX model, no GPU or NPU found: ONNX Runtime on the CPU")


def on_gpu(device: str) -> bool:
    """ONNX Runtime's `auto` is CUDA where this build has it; any other device but the CPU is a GPU's."""
    if device.lower() != "auto":
        return device.lower() != "cpu"
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


ENGINE = Engine(
    key="onnx",
    formats=(".onnx",),
    install="pip install onnxruntime (GPU: onnxruntime-gpu in its place; Jetson: JetPack's onnxruntime-gpu wheel)",
    probe=probe,
    load=load,
    rank=rank,
    listed=0,
    distributions=("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
    options=OnnxRuntimeOptions,
    cpu_threads=True,
    off_cpu=on_gpu,
)
