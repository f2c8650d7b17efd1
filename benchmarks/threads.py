"""Default engine threads vs every hand-picked setting, per engine, on 1 and 4 streams: fps and CPU per frame.

    python -m benchmarks.threads [--seconds 8] [--engines onnx,openvino,tflite] [--cases "1 camera,4 files"]

Four cases: a detect loop over vtest.avi frames (pre-processing, inference, decoding: `edge detect`, a library
user's loop); the service with one camera (vtest.avi as a live source at its own 10 fps: the fps are the camera's,
CPU per frame tells the settings apart, the median inference is its latency; measured once the camera's engine
threads were judged, `CameraThreads`); the service with one file (file mode, unpaced: a frame in each lane);
the service with four vtest.avi files on one shared engine. Each setting runs with the default (the thread budget of
edge/detection/threads.py, the detect loop measuring one thread against the budget's on its own frames; nothing
spinning; OpenVINO with a CPU stream per lane) and with each hand-picked count; ONNX Runtime also with spinning
during runs and always. Settings are alternated, twice. `--busy N`: N other processes keep cores busy meanwhile
(issue 62: two threads paid only on an idle machine).

A hand-picked setting that resolves to the default's own plan (the same threads per lane, lanes and spinning, by
the service's rules: `plan_of`) is not run: it is the default measured again, and comparing the default with the
best of its repeats compared it with its own noise (4 files: 102-112 fps for one plan, BENCHMARKS.md).

Target (issue 23): among the settings whose fps is >= 0.95 of the fastest, the most efficient has the lowest CPU
per frame; the default's CPU per frame / that one's <= 1.15, with the default's own fps >= 0.95 of the fastest.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from benchmarks.common import MODELS, VTEST, busy_cores, cpu_seconds, machine, read_frames
from benchmarks.shared import run_service
from edge_inference.backends.onnxruntime_backend import spinning
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.threads import plan_engine, usable_cores

ENGINES = {
    "onnx": str(MODELS / "onnx/yolox_nano.onnx"),
    "openvino": str(MODELS / "openvino/yolox_nano.xml"),
    "tflite": str(MODELS / "tflite/yolov8n_full_integer_quant.tflite"),
}


@dataclass(frozen=True)
class Setting:
    name: str
    threads: int | None
    options: dict[str, dict[str, object]]


@dataclass
class Figure:
    fps: float
    cpu_ms: float
    inference_ms: float | None = None  # the service's median inference (a camera's latency)


def settings_for(backend: str, cores: int) -> list[Setting]:
    chosen = [Setting("default", None, {})]
    if backend != "onnx":
        return chosen + [Setting(f"t{n}", n, {}) for n in range(1, cores + 1)]
    for suffix, spins in (("", "off"), ("+runs", "runs"), ("+spin", "on")):  # never, within an inference, always
        chosen += [Setting(f"t{n}{suffix}", n, {"onnx": {"spinning": spins}}) for n in range(1, cores + 1)]
    return chosen


def one_stream(model: str, backend: str, setting: Setting, frames: list, seconds: float) -> Figure:
    config = DetectorConfig(model, backend=backend, threads=setting.threads, engine_options=setting.options)
    detector = load_detector(config)
    detector.warmup()
    done, started, cpu0 = 0, time.monotonic(), cpu_seconds()
    while time.monotonic() - started < seconds:
        detector.detect(frames[done % len(frames)])
        done += 1
    figure = Figure(done / (time.monotonic() - started), (cpu_seconds() - cpu0) * 1e3 / done)
    detector.close()
    return figure


def service(model: str, backend: str, setting: Setting, seconds: float, streams: int, live: bool) -> Figure:
    options = setting.options
    result = run_service(model, backend, seconds, streams, True, 1, setting.threads, options, live=live)
    return Figure(float(result["fps"]), float(result["cpu_ms"]), float(result["inference_ms"]))  # type: ignore[arg-type]


CASES = {  # name -> (streams, live); None: the detect loop
    "detect loop": None,
    "1 camera": (1, True),
    "1 file": (1, False),
    "4 files": (4, False),
}


def plan_of(backend: str, shape: tuple[int, bool] | None, setting: Setting, cores: int) -> tuple[int, int, str]:
    """(threads per lane, lanes, spinning) that a setting resolves to, by the service's own rules: a hand-picked
    setting with the default's plan is the default measured again, not an alternative to it."""
    if shape is None:  # the detect loop: one inference at a time, back to back
        if setting.threads is None:
            return 0, 1, "measured on the loop's frames"  # one thread or the budget's, whichever pays (LoopThreads)
        threads, lanes = setting.threads, 1
    else:
        streams, live = shape
        plan = plan_engine(streams * (1 if live else cores), 1, cores, setting.threads)  # a file: a lane per core
        threads, lanes = plan.threads, plan.lanes
        if live and streams == 1 and setting.threads is None:
            return 0, 1, "fitted to the camera"  # a lone camera's default moves to one thread where one keeps up
    spins = "-"  # one thread has no others to hand work to: nothing spins
    if backend == "onnx" and threads > 1:
        spins = spinning(str(setting.options.get("onnx", {}).get("spinning", "auto")))
    return threads, lanes, spins


def verdict(name: str, results: dict[str, Figure], same: list[str]) -> None:
    fastest = max(f.fps for f in results.values())
    eligible = {k: f for k, f in results.items() if f.fps >= 0.95 * fastest}
    efficient = min(eligible, key=lambda k: eligible[k].cpu_ms)
    default = results["default"]
    ratio = default.cpu_ms / eligible[efficient].cpu_ms
    fps_share = default.fps / fastest
    status = "met" if ratio <= 1.15 and fps_share >= 0.95 else "MISSED"
    print(f"{name}")
    for key, figure in results.items():
        latency = "" if figure.inference_ms is None else f"   inference ms {figure.inference_ms:6.1f}"
        print(f"    {key:<10} fps {figure.fps:7.2f}   CPU ms/frame {figure.cpu_ms:7.2f}{latency}")
    if same:
        print(f"    the default's own plan, not run again: {', '.join(same)}")
    print(
        f"  default: CPU per frame / most efficient ({efficient}) {ratio:.2f}, fps / fastest {fps_share:.2f}  "
        f"target <= 1.15 and >= 0.95: {status}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--cases", default=",".join(CASES), help=f"some of: {', '.join(CASES)}")
    parser.add_argument("--busy", type=int, default=0, help="cores kept busy by other processes meanwhile")
    args = parser.parse_args()
    cases = {name: CASES[name] for name in args.cases.split(",")}
    cores = usable_cores()
    frames = read_frames(VTEST, 60)
    print(f"# default threads vs hand-picked: fps and CPU ms per frame; {args.seconds:g} s each, alternated twice")
    print(f"# {machine()}; usable cores {cores}; other processes keeping {args.busy} core(s) busy meanwhile")
    with busy_cores(args.busy):
        _measure(args, cases, cores, frames)
    print("# each figure: the run of the two with more fps (the camera's: less CPU); t<N> is `threads: N` per stream")
    return 0


def _measure(args: argparse.Namespace, cases: dict, cores: int, frames: list) -> None:
    for backend in args.engines.split(","):
        model = ENGINES[backend]
        runs: dict[str, dict[str, list[Figure]]] = {case: {} for case in cases}
        same: dict[str, list[str]] = {case: [] for case in cases}  # settings that are the default's own plan
        for _ in range(2):
            for case, shape in cases.items():
                default_plan = plan_of(backend, shape, Setting("default", None, {}), cores)
                for setting in settings_for(backend, cores):
                    if setting.name != "default" and plan_of(backend, shape, setting, cores) == default_plan:
                        if setting.name not in same[case]:
                            same[case].append(setting.name)
                        continue
                    figure = (
                        one_stream(model, backend, setting, frames, args.seconds)
                        if shape is None
                        else service(model, backend, setting, args.seconds, *shape)
                    )
                    runs[case].setdefault(setting.name, []).append(figure)
        for case in cases:
            verdict(f"{backend} {case}", {k: best(v) for k, v in runs[case].items()}, same[case])


def best(runs: list[Figure]) -> Figure:
    return max(runs, key=lambda f: (round(f.fps), -f.cpu_ms))  # a camera's fps are its own: then the CPU decides


if __name__ == "__main__":
    raise SystemExit(main())
