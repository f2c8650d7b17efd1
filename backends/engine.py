"""An inference engine is one module that declares itself: `ENGINE = Engine(...)`.

The declaration says what the engine is called, which model files it reads, how to install it, how to probe it
(availability and devices), how to open a model (`load`), and what it offers for `--backend auto` (`rank`).
Discovery, `edge backends`, `--backend auto`, the registry's choice of file per engine and the loader all read these
declarations; nothing else names an engine. Engines are found by scanning this package for `*_backend` modules
with an `ENGINE`, and in the `edge_inference.engines` entry-point group, so an engine can also ship as its own
distribution (as Frigate's detector plugins are found by scanning their folder).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_inference.backends.base import BackendError
from edge_inference.backends.declared import declared
from edge_inference.backends.names import backend_named
from edge_inference.backends.options import EngineOptions, parse_options

if TYPE_CHECKING:
    from edge_inference.backends.base import Backend, BackendOptions, Description

ENTRY_POINT_GROUP = "edge_inference.engines"


@dataclass
class BackendStatus:
    key: str
    available: bool
    engine: str | None = None
    devices: list[str] = field(default_factory=list)
    problem: str | None = None  # why it cannot run here, with the fix
    install: str = ""
    formats: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Offer:
    """What an engine offers for `--backend auto`: the highest score wins."""

    score: int  # 100: made for this file (Edge TPU), 90: an accelerator, 50: a good CPU engine, 10: a stand-in
    device: str
    reason: str


@dataclass(frozen=True)
class Choice:
    backend: str
    device: str
    reason: str


@dataclass(frozen=True)
class Engine:
    key: str
    formats: tuple[str, ...]  # file name endings it reads, the one it prefers first
    install: str
    probe: Callable[[], BackendStatus]
    load: Callable[[Path, BackendOptions], Backend]
    rank: Callable[[Path], Offer | None]
    excludes: tuple[str, ...] = ()  # endings it does not read although a format matches (e.g. _edgetpu.tflite)
    listed: int = 100  # where `edge backends` lists it: the built-in engines first, plugins after
    # Python distributions whose versions decide its speed: `--backend auto` measures again when one changes
    distributions: tuple[str, ...] = ()
    # Its own settings (a stream's `engine_options: {key: {...}}`), checked before anything is loaded
    options: type[EngineOptions] = EngineOptions
    # Reads a model's tensors without compiling it, where that is cheap and the engine is to take the
    # pre-processing (`BackendOptions.pixels`): the spec is then known before `load`. None: it will not take it
    describe: Callable[[Path, BackendOptions], Description | None] | None = None
    # A model reference it opens instead of a file: a server's address (`triton://HOST:PORT/MODEL`). Such an engine
    # runs nothing on this machine's CPU, reads no file, and `auto` takes it only for its own references
    serves: Callable[[str], bool] | None = None
    # For such an engine: one line on the server a reference names (it answers, the model is ready, what it serves),
    # or a BackendError saying what is wrong (`edge doctor --server`)
    reach: Callable[[str], str] | None = None
    # An accelerator's: which chip a device setting names ("auto", "usb" and "usb:0" are one Edge TPU where one is
    # plugged in). Its models run in a process of their own, one per chip, whatever the chip is called. None: an
    # engine that runs on the CPU or a GPU
    chip: Callable[[str], str] | None = None
    # Its `threads` are CPU threads where it runs on the CPU (ONNX Runtime, OpenVINO, LiteRT): the thread budget
    # shares them among the engines, and a loop of frames back to back measures whether more than one pays
    cpu_threads: bool = False
    # Whether a device setting puts it off the CPU (a GPU, an NPU, a delegate): its native code then runs in a
    # process of its own. The default: any device but `auto` and `cpu`
    off_cpu: Callable[[str], bool] = field(default=lambda device: device.lower() not in ("auto", "cpu"))

    def parse_options(self, raw: Mapping[str, Any] | EngineOptions) -> EngineOptions:
        return parse_options(self.key, self.options, raw)

    def versions(self) -> dict[str, str]:
        """Installed versions of its distributions, read from their metadata (nothing imported)."""
        found = {}
        for name in self.distributions:
            try:
                found[name] = version(name)
            except PackageNotFoundError:
                continue
        return found

    def reads(self, file_name: str) -> bool:
        name = file_name.lower()
        return name.endswith(self.formats) and not name.endswith(self.excludes)

    def status(self, available: bool = False, **figures: object) -> BackendStatus:
        """A status of this engine with its install line and formats filled in."""
        return BackendStatus(self.key, available, install=self.install, formats=list(self.formats), **figures)  # type: ignore[arg-type]


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@functools.cache
def engines() -> dict[str, Engine]:
    """Every engine declared in this package and by installed plugins, by key."""
    found: dict[str, Engine] = {}
    for engine in declared(__package__ or "", Path(__file__).parent, "_backend", "ENGINE", Engine, ENTRY_POINT_GROUP):
        found.setdefault(engine.key, engine)  # a plugin never replaces a built-in engine of its key
    return dict(sorted(found.items(), key=lambda item: (item[1].listed, item[0])))


def get_engine(key: str) -> Engine:
    found = engines()
    return found[backend_named(key, found)]


def serving_engine(model: str) -> Engine | None:
    """The engine whose server a model reference names (`triton://...`); None for a file or a registry name."""
    for engine in engines().values():
        if engine.serves is not None and engine.serves(model):
            return engine
    return None


# files a user may give --model by mistake (the image or video meant for the source), said as what they are
NOT_MODELS = dict.fromkeys((".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".heic"), "an image")
NOT_MODELS |= dict.fromkeys((".mp4", ".avi", ".mkv", ".mov", ".webm", ".h264"), "a video")


def choose(path: Path) -> Choice:
    """The best engine this machine has for a model file, and why (`--backend auto`)."""
    offers = [(offer, key) for key, engine in engines().items() if (offer := engine.rank(path)) is not None]
    if not offers:
        readers = [key for key, engine in engines().items() if engine.reads(path.name)]
        if not readers and path.suffix.lower() in NOT_MODELS:
            raise BackendError(
                f"{path.name} is {NOT_MODELS[path.suffix.lower()]}, not a model: give --model a model file (.onnx, "
                ".tflite, an OpenVINO .xml, .hef, .rknn) or a registry name (`edge models list`)"
            )
        raise BackendError(
            f"no installed engine can run {path.name}"
            + (f"; {', '.join(readers)} would: see `edge backends` for how to install" if readers else "")
        )
    offer, key = max(offers, key=lambda pair: pair[0].score)
    return Choice(key, offer.device, offer.reason)


def check_engine_options(blocks: Mapping[str, Any]) -> dict[str, EngineOptions]:
    """A stream's `engine_options` (a block per engine), each parsed by its engine into its own typed options (the
    engines' option models keyed by engine: the config holds them typed, and `load` receives them so); one line for
    a mistake."""
    if not isinstance(blocks, Mapping):
        raise BackendError("engine_options must map an engine to its options, e.g. {onnx: {trt_fp16: false}}")
    for key in blocks:
        if key not in engines():
            raise BackendError(f"engine_options names {key!r}, which is no engine; choose from: {', '.join(engines())}")
    return {key: engines()[key].parse_options(block) for key, block in blocks.items()}
