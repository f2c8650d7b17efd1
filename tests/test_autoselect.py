"""`--backend auto` by measurement: timed once per model, engines and machine, then read without importing
engines it does not use."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from edge_inference.backends.hardware import intel_accelerators
from edge_inference.edge.detection.auto import choice as chooser
from edge_inference.edge.detection.auto import figures, store, timing, watch, worker
from edge_inference.edge.detection.auto.candidates import candidates
from edge_inference.edge.detection.auto.choice import AutoChoice, live_check
from edge_inference.edge.detection.auto.decide import auto_choice
from edge_inference.edge.detection.auto.figures import Measurement, certainty, fastest
from edge_inference.edge.detection.auto.lock import longest_measurement_s
from edge_inference.edge.detection.auto.store import cache_key, cache_path
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.machine import describe_machine
from edge_inference.edge.detection.model_files import ModelFiles, every_engine
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings
from edge_inference.models.download import ModelFile
from tests.conftest import MODELS, REPO
from tests.fake_devices import usb_device, write
from tests.helpers import install_engine_plugin, run_edge
from tests.server import running_server


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("EDGE_MODEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGE_AUTO_CACHE", str(tmp_path / "auto.json"))
    return Settings(model_cache=tmp_path / "cache", model_mirror=str(MODELS), auto_cache=tmp_path / "auto.json")


@pytest.mark.process
def test_bench_times_every_engine_that_runs_the_model_and_keeps_the_result(settings: Settings):
    env = {"EDGE_MODEL_CACHE": str(settings.model_cache), "EDGE_AUTO_CACHE": str(settings.auto_cache)}
    result = run_edge("backends", "--bench", "yolox-nano", env=env)
    assert result.returncode == 0, result.stderr
    assert f"3 rounds of {float(os.environ['EDGE_AUTO_ROUND_S']):g} s each" in result.stderr  # EDGE_AUTO_ROUND_S
    engines = ("onnx", "openvino", "tflite")
    rows = {
        line.split()[0]: line for line in result.stdout.splitlines() if line.split()[:1] and line.split()[0] in engines
    }
    assert set(rows) == {"onnx", "openvino", "tflite"}  # each engine with its own file of the same weights
    assert "yolox-nano-tflite" in rows["tflite"] and "yolox-nano-openvino" in rows["openvino"]
    chosen = next(key for key, row in rows.items() if "<- --backend auto" in row)
    assert any(result.stdout.splitlines()[-1].startswith(f"choice: {word}") for word in ("sure", "close", "likely"))
    stored = json.loads(cache_path(settings).read_text())
    assert list(stored) == [cache_key(candidates(every_engine("yolox-nano", settings), settings))]
    (entry,) = stored.values()
    # the figures as stored, not as rounded for the table: a rounding cannot flip the comparison
    fps = {r["backend"]: max(r["fps_rounds"]) for r in entry["results"]}  # each engine's best round
    cpu = {r["backend"]: r["cpu_ms"] for r in entry["results"]}
    quickest = max(fps, key=lambda k: fps[k])
    # the highest throughput, or one within 3% of it that costs less CPU per frame
    assert chosen == quickest or (fps[chosen] >= 0.97 * fps[quickest] and cpu[chosen] < cpu[quickest])
    assert all(len(r["fps_rounds"]) == 3 and r["cpu_ms"] > 0 for r in entry["results"])  # each timed in 3 turns


def test_the_pick_breaks_a_tie_within_the_noise_by_cpu_per_frame_and_says_how_sure_it_is():
    def timed(backend: str, rounds: list[float], cpu_ms: float) -> Measurement:
        median = sorted(rounds)[1]
        return Measurement(backend, "cpu", "m", 1000 / median, None, rounds, cpu_ms)

    spinning = timed("onnx", [100.0, 101.0, 99.0], 30.0)  # a hair faster, twice the CPU
    frugal = timed("openvino", [98.5, 99.0, 98.0], 15.0)
    slow = timed("tflite", [60.0, 61.0, 59.0], 20.0)
    assert fastest([spinning, frugal, slow]) is frugal
    assert certainty([spinning, frugal, slow]).startswith("close: openvino and onnx are within 3%")
    assert fastest([spinning, slow]) is spinning
    assert certainty([spinning, slow]).startswith(
        "sure: every round of onnx beat every round of the others (1.66x tflite)"
    )
    ahead = timed("onnx", [100.0, 92.0, 96.0], 30.0)
    overlapping = timed("openvino", [95.0, 93.0, 90.0], 15.0)
    assert certainty([ahead, overlapping]).startswith("likely: onnx is ahead in its best round")


def test_a_burst_of_load_over_some_rounds_of_one_engine_does_not_decide_the_pick():
    """Measured here while 50 uploads reached the service: two of ONNX Runtime's three rounds were slowed, and the
    median picked OpenVINO, which used 1.2x the CPU per frame (the stream moved to it, +380 MiB)."""
    disturbed = Measurement("onnx", "cpu", "m", 1000 / 60.6, None, [56.2, 60.6, 78.4], 18.5)
    other = Measurement("openvino", "CPU", "m", 1000 / 74.2, None, [56.4, 75.6, 74.2], 22.5)
    assert (disturbed.fps or 0) < (other.fps or 0)  # at the median, OpenVINO looked 1.22x faster
    assert fastest([disturbed, other]) is disturbed
    assert fastest([other, disturbed]) is disturbed
    assert certainty([disturbed, other]).startswith("likely: onnx is ahead in its best round")


def _store(settings: Settings, model: str, timings: dict[str, float]) -> None:
    """A measurement as the cache keeps it, with made-up timings that decide the choice."""
    found = candidates(every_engine(model, settings), settings)
    results = [
        {"backend": c.backend, "device": c.device, "model": c.model, "ms_p50": timings[c.backend], "error": None}
        for c in found
    ]
    key = cache_key(found)
    cache_path(settings).parent.mkdir(parents=True, exist_ok=True)
    cache_path(settings).write_text(json.dumps({key: {"model": model, "results": results}}))


def test_auto_reads_the_stored_measurement_instead_of_measuring_again(settings: Settings):
    _store(settings, "yolox-nano", {"onnx": 30.0, "openvino": 20.0, "tflite": 10.0})
    choice = auto_choice(every_engine("yolox-nano", settings), settings)
    assert (choice.backend, choice.model) == ("tflite", "yolox-nano-tflite")
    assert "fastest here when measured (100.0 frames/s" in choice.reason


def _fresh_env(settings: Settings) -> dict[str, str]:
    """A fresh process's environment on this test's caches and the shared models."""
    return {
        **os.environ,
        "EDGE_MODEL_CACHE": str(settings.model_cache),
        "EDGE_AUTO_CACHE": str(settings.auto_cache),
        "EDGE_MODEL_MIRROR": str(MODELS),
    }


@pytest.mark.process
def test_auto_on_the_cached_choice_imports_no_other_engine(settings: Settings):
    """Naming the engine or letting auto pick it from the cache loads the same modules: OpenVINO (+46 MiB) is
    not imported to look for accelerators a machine without Intel GPU or NPU nodes cannot have."""
    _store(settings, "yolox-nano", {"onnx": 10.0, "openvino": 20.0, "tflite": 30.0})
    code = (
        "import sys\n"
        "from edge_inference.edge.detection.loader import DetectorConfig, load_detector\n"
        "d = load_detector(DetectorConfig('yolox-nano'))\n"
        "print(d.backend.key, 'openvino' in sys.modules, 'ai_edge_litert' in sys.modules)\n"
    )
    env = _fresh_env(settings)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert out.stdout.split() == ["onnx", "False", "False"], out.stderr


@pytest.mark.process
def test_auto_on_a_cached_openvino_pick_leaves_onnx_runtime_out_of_memory(settings: Settings, tmp_path: Path):
    """Ranking the engines asked ONNX Runtime whether it had CUDA by importing it (+21 MiB where the pick was
    OpenVINO: auto's memory was not its pick's, issue 62). The CPU package ships no CUDA provider library, and that
    is read from its files; a package that ships one (onnxruntime-gpu, a Jetson's wheel) is still asked."""
    _store(settings, "yolox-nano", {"onnx": 30.0, "openvino": 10.0, "tflite": 20.0})  # ms a frame: OpenVINO first
    code = (
        "import sys\n"
        "from edge_inference.backends.onnxruntime_backend import ships_cuda\n"
        "from edge_inference.edge.detection.loader import DetectorConfig, load_detector\n"
        "d = load_detector(DetectorConfig('yolox-nano'))\n"
        "print(d.backend.key, 'onnxruntime' in sys.modules, 'ai_edge_litert' in sys.modules, ships_cuda())\n"
    )
    env = _fresh_env(settings)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert out.stdout.split() == ["openvino", "False", "False", "False"], out.stderr
    gpu_build = tmp_path / "gpu" / "onnxruntime"  # an installed onnxruntime-gpu's layout, found before the CPU one
    (gpu_build / "capi").mkdir(parents=True)
    (gpu_build / "__init__.py").write_text("")
    (gpu_build / "capi" / "libonnxruntime_providers_cuda.so").write_bytes(b"")
    check = "from edge_inference.backends.onnxruntime_backend import ships_cuda; print(ships_cuda())"
    env["PYTHONPATH"] = f"{gpu_build.parent}{os.pathsep}{REPO}"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert out.stdout.split() == ["True"], out.stderr


def test_a_different_machine_or_engine_set_measures_again(settings: Settings, tmp_path: Path, monkeypatch):
    found = candidates(every_engine("yolox-nano", settings), settings)
    before = cache_key(found)
    assert cache_key(found[:2]) != before
    root = tmp_path / "root"
    usb_device(root, "2-1", "18d1", "9302", "5000")  # a Coral USB Accelerator plugged in
    monkeypatch.setenv("EDGE_SYSROOT", str(root))
    assert cache_key(found) != before


def test_the_same_cpu_name_with_other_vector_instructions_measures_again(
    settings: Settings, tmp_path: Path, monkeypatch
):
    """A cloud VM keeps its model name on hosts with and without AVX-512 (int8 LiteRT ran 4x slower without it,
    and the engines' order changed): a pick measured on one is not taken for the other, and benchmark output names
    the instructions. A Pi's `Features` line counts the same way (a Pi 5's A76 has the dot product a Pi 4's lacks)."""
    found = candidates(every_engine("yolox-nano", settings), settings)
    machines = {
        "avx2": "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma avx2\n",
        "avx512": "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma avx2 avx512f avx512bw avx512_vnni\n",
        "pi4": "processor\t: 0\nFeatures\t: fp asimd evtstrm crc32 cpuid\nModel\t\t: Raspberry Pi 4 Model B\n",
        "pi5": "processor\t: 0\nFeatures\t: fp asimd crc32 atomics asimdrdm lrcpc dcpop asimddp\n"
        "Model\t\t: Raspberry Pi 4 Model B\n",  # the same card's name, a newer core: only the flags differ
    }
    keys, described = {}, {}
    for name, cpuinfo in machines.items():
        write(tmp_path / name, "/proc/cpuinfo", cpuinfo)
        monkeypatch.setenv("EDGE_SYSROOT", str(tmp_path / name))
        keys[name], described[name] = cache_key(found), describe_machine()
    assert len(set(keys.values())) == len(machines)
    assert described["avx2"].startswith("AMD EPYC (avx2), ")
    assert described["avx512"].startswith("AMD EPYC (avx2 avx512f avx512_vnni), ")
    assert described["pi4"].startswith("Raspberry Pi 4 Model B, ")  # none of the instructions engines look for
    assert described["pi5"].startswith("Raspberry Pi 4 Model B (asimddp), ")


def _measuring_elsewhere(settings: Settings) -> subprocess.Popen[str]:
    """Another edge process holding the machine's measurement, of one engine by `settings`' budget (it lets go when
    its input closes)."""
    holder_code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from edge_inference.edge.detection.auto.lock import measuring_on_this_machine\n"
        "from edge_inference.edge.settings import Settings\n"
        f"settings = Settings(auto_cache=Path({str(settings.auto_cache)!r}), auto_budget_s={settings.auto_budget_s})\n"
        "with measuring_on_this_machine(settings):\n"
        "    print('measuring', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", holder_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "measuring"
    return holder


@pytest.mark.process
def test_a_process_that_finds_the_engines_being_timed_waits_and_takes_that_measurement(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """Two processes starting together (a service and `edge detect --backend auto`) must not time the engines side
    by side: each would slow the other's engines and rank them at random, and one's entry in the cache would be
    lost. The second says it waits, then reads what the first stored instead of measuring again. Its watchdog does
    not wait meanwhile (it checks every stream for stuck inferences)."""
    monkeypatch.setattr(chooser, "_PICKED", {})  # this test's pick stays out of the other tests' services
    monkeypatch.setattr(chooser, "_PICKED_AT", {})
    monkeypatch.setattr(chooser, "_REMEASURED", {})
    holder = _measuring_elsewhere(settings)
    try:
        choices: list[AutoChoice] = []
        waiter = threading.Thread(
            target=lambda: choices.append(auto_choice(every_engine("yolox-nano", settings), settings))
        )
        waiter.start()
        said = ""
        deadline = time.monotonic() + 120
        while "waiting for it to finish" not in said and waiter.is_alive() and time.monotonic() < deadline:
            said += capsys.readouterr().err
            time.sleep(0.05)
        assert f"another edge process on this machine (pid {holder.pid}) is timing engines" in said
        assert waiter.is_alive()  # still waiting: it has not measured on its own
        # the watchdog's live check of another stream asks for a new measurement meanwhile: it must not wait too
        gone = tmp_path / "gone.onnx"  # measured again once the lock is free: fails at once, nothing to time
        file = ModelFile("gone", str(gone), gone)
        missing = ModelFiles(str(gone), file, {"onnx": file}, {})
        slowed = AutoChoice("onnx", "cpu", str(gone), "", key="a stream whose pick slowed")
        asked: list[bool] = []
        watchdog = threading.Thread(
            target=lambda: asked.append(chooser.remeasure_in_background(slowed, missing, settings, "slowed"))
        )
        watchdog.start()
        watchdog.join(timeout=60)
        assert asked == [True] and waiter.is_alive()  # answered while the other process still measures
        _store(settings, "yolox-nano", {"onnx": 30.0, "openvino": 20.0, "tflite": 10.0})  # what the other one found
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    waiter.join(timeout=120)
    said += capsys.readouterr().err
    assert [c.backend for c in choices] == ["tflite"]
    assert "timing the engines that can run yolox-nano" not in said


@pytest.mark.process
def test_a_measurement_held_by_a_stopped_process_is_waited_for_no_longer_than_one_can_take(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """`edge backends --bench` suspended with Ctrl-Z (or stuck in a driver) keeps its lock: a service or `edge
    detect --backend auto` must not wait for it forever. The holder's lock file says who it is and how long its
    measurement can take by its own limits (here a budget of 0.1 s); both ways of waiting give up once that has
    passed, even though their own limits would allow an hour, name the process and say what to do: the bench with
    one clear error, auto by going on with the engines' ranking."""
    for bookkeeping in ("_FAILED", "_PICKED", "_PICKED_AT"):  # what this test leaves there stays out of the others
        monkeypatch.setattr(chooser, bookkeeping, type(getattr(chooser, bookkeeping))())
    quick = settings.model_copy(update={"auto_budget_s": 0.1})
    patient = settings.model_copy(update={"auto_budget_s": 1000.0})  # its own bound: over an hour
    model = str(MODELS / "openvino/yolox_nano.xml")  # one engine runs it
    holder = _measuring_elsewhere(quick)
    os.kill(holder.pid, signal.SIGSTOP)
    lock = cache_path(settings).with_name(cache_path(settings).name + ".lock")
    pid, started, longest = lock.read_text().split()
    assert int(pid) == holder.pid and float(longest) == pytest.approx(longest_measurement_s(1, quick), 0.01)
    try:
        said: list[str] = []
        benched: list[Exception] = []

        def bench() -> None:
            try:
                found = candidates(every_engine(model, patient), patient)
                timing.measure(found, model, patient, say=said.append)
            except EdgeError as exc:
                benched.append(exc)

        bench_thread = threading.Thread(target=bench)
        bench_thread.start()
        found = candidates(every_engine(model, patient), patient)
        assert (
            chooser.stored_results(cache_key(found), found, model, patient) == []
        )  # the detect/service path: nothing measured
        gave_up = time.monotonic()
        bench_thread.join(timeout=120)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert gave_up >= float(started) + float(longest)  # not before the holder's measurement should have ended
    assert said == [
        f"another edge process on this machine (pid {holder.pid}) is timing engines; waiting for it to finish first"
    ]
    assert len(benched) == 1
    for message in (str(benched[0]), capsys.readouterr().err):
        assert f"(pid {holder.pid})" in message and "stopped (Ctrl-Z) or stuck" in message, message
        assert "kill -CONT" in message and "EDGE_AUTO_MEASURE=0" in message, message
    assert store.read_cache(settings) == {}  # nothing measured beside the stopped one


def test_one_candidate_needs_no_measurement(settings: Settings):
    choice = auto_choice(
        every_engine(str(MODELS / "openvino/yolox_nano.xml"), settings), settings
    )  # only OpenVINO reads IR
    assert choice.backend == "openvino" and "the only engine here that runs it" in choice.reason
    assert not cache_path(settings).exists()


def test_intel_gpu_and_npu_nodes_are_found_without_openvino(tmp_path: Path, monkeypatch):
    write(tmp_path, "sys/class/drm/renderD128/device/vendor", "0x8086\n")
    write(tmp_path, "sys/class/drm/renderD129/device/vendor", "0x10de\n")  # an NVIDIA card: not OpenVINO's
    write(tmp_path, "dev/accel/accel0")
    assert intel_accelerators(tmp_path) == ["GPU  Intel graphics at /dev/dri/renderD128", "NPU  /dev/accel/accel0"]


@pytest.mark.process
def test_a_measurement_that_cannot_be_kept_is_one_clear_line_and_detection_goes_on(tmp_path: Path):
    """EDGE_AUTO_CACHE under a file (not a folder): the measurement cannot be stored; auto says so in one line and
    chooses by ranking instead of failing, without timing the engines first (it did, for half a minute at every
    start, and threw the result away)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {"EDGE_AUTO_CACHE": str(blocker / "auto.json"), "EDGE_MODEL_CACHE": str(tmp_path / "cache")}
    photo = MODELS.parent / "media" / "cat_720p.jpg"
    result = run_edge("detect", str(photo), "-m", "yolox-nano", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "EDGE_AUTO_CACHE" in errors[0]
    assert f"{blocker} is a file, not a folder" in errors[0]  # not mkdir's "File exists"
    assert "no measurement could be made or kept" in result.stderr  # the note on what auto did instead
    assert "timing the engines" not in result.stderr and "loading " not in result.stderr
    assert "cat" in [d["label"] for d in json.loads(result.stdout)["detections"]]
    # the bench, whose table it is to keep, says so before timing anything (it had timed every engine, then failed)
    bench = run_edge("backends", "--bench", "yolox-nano", env=env)
    lines = [line for line in bench.stderr.splitlines() if line.startswith("error:")]
    assert bench.returncode == 1 and len(lines) == 1 and "EDGE_AUTO_CACHE" in lines[0], bench.stderr
    assert "loading " not in bench.stderr and "Traceback" not in bench.stderr


# An engine that never finishes loading here (as OpenVINO under emulation, or a model far too large for the device):
# ONNX Runtime underneath, ranked last so the ranking never picks it.
SLUGGISH_ENGINE = textwrap.dedent(
    """
    import time

    from edge_inference.backends.engine import Engine, Offer


    def probe():
        return ENGINE.status(True, engine="sluggish 0.1", devices=["slug0  a very slow device"])


    def load(path, options):
        time.sleep(3600)


    def rank(path):
        return Offer(1, "slug0", "a very slow device") if ENGINE.reads(path.name) else None


    ENGINE = Engine(key="sluggish", formats=(".onnx",), install="-", probe=probe, load=load, rank=rank)
    """
)
BUDGET_S = 10  # generous for a real engine on a loaded machine; the sluggish one never makes it


@pytest.fixture
def sluggish_plugin(tmp_path: Path) -> dict[str, str]:
    site = install_engine_plugin(tmp_path / "site", "sluggish", SLUGGISH_ENGINE)
    return {
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]),
        "EDGE_AUTO_BUDGET_S": str(BUDGET_S),
        "EDGE_AUTO_CACHE": str(tmp_path / "auto.json"),
        "EDGE_MODEL_CACHE": str(tmp_path / "cache"),
        "EDGE_MODEL_MIRROR": str(MODELS),
    }


@pytest.mark.process
def test_an_engine_that_cannot_finish_within_its_budget_loses_and_the_others_are_still_compared(sluggish_plugin):
    result = run_edge("backends", "--bench", "yolox-nano", env=sluggish_plugin, timeout=600)
    assert result.returncode == 0, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("loading ")]
    assert len(progress) == 4 and progress[-1].startswith(f"loading sluggish (slug0), 4 of 4, at most {BUDGET_S} s")
    assert f"too slow here: not loaded and warmed up within {BUDGET_S} s" in result.stdout
    stored = json.loads(Path(sluggish_plugin["EDGE_AUTO_CACHE"]).read_text())
    (entry,) = stored.values()
    timed = {r["backend"] for r in entry["results"] if r["ms_p50"]}
    assert "sluggish" not in timed and timed & {"onnx", "openvino", "tflite"}
    # the pick is one of the timed engines (not necessarily the first row: a tie within 3% goes to less CPU)
    picked = [line for line in result.stdout.splitlines() if "<- --backend auto" in line]
    assert len(picked) == 1 and picked[0].startswith(tuple(timed)), result.stdout


@pytest.mark.process
def test_the_service_serves_while_auto_measures_then_moves_to_the_measured_pick(sluggish_plugin, tmp_path: Path):
    cache = Path(sluggish_plugin["EDGE_AUTO_CACHE"])
    args = ["--source", str(MODELS.parent / "media" / "vtest.avi"), "--loop", "--backend", "auto"]
    with running_server(args, tmp_path / "serve.log", env=sluggish_plugin) as server:
        server.wait_until("/health/ready", timeout=120)
        server.wait_for_frames("main", 5, timeout=120)
        assert not cache.exists()  # frames flowed while the sluggish engine was still being waited for
        notes = server.client.get("/api/v1/streams").json()[0]["notes"]
        assert "the engines are being timed in the background" in notes[0]
        deadline = time.monotonic() + BUDGET_S * 4 + 120
        while not cache.exists():
            assert time.monotonic() < deadline, server.log
            time.sleep(0.5)
        (entry,) = json.loads(cache.read_text()).values()
        timed = [r for r in entry["results"] if r["ms_p50"]]
        best = max(timed, key=lambda r: max(r["fps_rounds"]))  # the best round's engine, or a tie at less CPU
        picks = {best["backend"]} | {
            r["backend"]
            for r in timed
            if max(r["fps_rounds"]) >= 0.97 * max(best["fps_rounds"]) and r["cpu_ms"] < best["cpu_ms"]
        }
        # on the measured pick, whichever it is (moved to it, or confirmed on it), and saying so
        while True:
            stream = server.client.get("/api/v1/streams").json()[0]
            if stream["backend"] in picks and "fastest here when measured" in stream["notes"][0]:
                break
            assert time.monotonic() < deadline, (stream, server.log)
            time.sleep(0.5)
        done = server.client.get("/api/v1/stats").json()["streams"]["main"]["frames_processed"]
        server.wait_for_frames("main", done + 5)
        log = server.log
    assert "loading sluggish (slug0), 4 of 4" in log and "too slow here" in log
    assert "Traceback" not in log


def _close_race(settings: Settings, infer_ms: float, others_busy: float | None = None) -> None:
    """A stored measurement whose pick is LiteRT by a hair (rounds overlapping), each engine said to infer in
    `infer_ms`, made while other programs kept `others_busy` cores busy."""
    found = candidates(every_engine("yolox-nano", settings), settings)
    fake = {"onnx": 30.0, "openvino": 29.5, "tflite": 31.0}  # fps: LiteRT ahead by a hair, rounds overlapping
    results = [
        {
            "backend": c.backend,
            "device": c.device,
            "model": c.model,
            "ms_p50": 1000 / fake[c.backend],
            "error": None,
            "fps_rounds": [fake[c.backend] - 1, fake[c.backend], fake[c.backend] + 1],
            "cpu_ms": 30.0,
            "infer_ms": infer_ms,
        }
        for c in found
    ]
    entry = {"model": "yolox-nano", "others_busy_cores": others_busy, "results": results}
    cache_path(settings).write_text(json.dumps({cache_key(found): entry}))


@pytest.mark.process
def test_the_service_never_judges_its_live_inferences_by_the_quiet_measurement(settings: Settings, tmp_path: Path):
    """The service's own inferences (a lane, under the load it makes itself) are unlike the measurement's (one engine
    alone, timed in turns): within 10 s of starting seven streams, auto found its live times 5.3x the quiet figure
    and measured again, moving streams off a shared engine. A stored pick that claims 0.01 ms inferences is kept:
    live figures are compared only with the service's own once it has settled (an hour here, so a machine that gets
    busier meanwhile cannot make a comparison fire), and nothing is measured again."""
    _close_race(settings, infer_ms=0.01)
    env = {
        "EDGE_MODEL_CACHE": str(settings.model_cache),
        "EDGE_AUTO_CACHE": str(settings.auto_cache),
        "EDGE_MODEL_MIRROR": str(MODELS),
        "EDGE_AUTO_SETTLE_S": "3600",
    }
    args = ["--source", str(MODELS.parent / "media" / "vtest.avi"), "--loop", "--no-pace", "--backend", "auto"]
    with running_server(args, tmp_path / "serve.log", env=env) as server:
        server.wait_until("/health/ready", timeout=120)
        assert server.client.get("/api/v1/streams").json()[0]["backend"] == "tflite"  # the stored pick
        server.wait_for_frames("main", 150, timeout=300)  # three times the live samples the old check judged by
        stream = server.client.get("/api/v1/streams").json()[0]
        log = server.log
    assert stream["backend"] == "tflite", log
    assert "again" not in log and "Traceback" not in log, log
    (entry,) = json.loads(cache_path(settings).read_text()).values()
    assert {r["infer_ms"] for r in entry["results"]} == {0.01}  # the stored measurement left as it was


def _infer(detector, count: int, burn_s: float = 0.0) -> None:
    """`count` real inferences as a stream's lane runs them, each followed by `burn_s` of this process's CPU."""
    for _ in range(count):
        detector.infer_timed(detector.prepare(worker.bench_image()).tensor)
        until = time.thread_time() + burn_s
        while time.thread_time() < until:
            pass


@pytest.fixture
def fresh_bookkeeping(monkeypatch: pytest.MonkeyPatch) -> None:
    for bookkeeping in ("_FAILED", "_PICKED", "_PICKED_AT", "_REMEASURED", "_STALE", "_LOOKED"):
        monkeypatch.setattr(chooser, bookkeeping, type(getattr(chooser, bookkeeping))())
    # windows of 20 inferences: the test's CPU burns are short. Set where the window reads it: a copy bound at import
    # (`from choice import LIVE_SAMPLES`) kept 100 whenever an earlier test had imported the watch first
    monkeypatch.setattr(watch, "LIVE_SAMPLES", 20)


@pytest.mark.process
def test_a_pick_is_measured_again_when_the_services_cpu_per_frame_grows_and_never_for_slower_wall_times(
    settings: Settings, fresh_bookkeeping: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """Once settled, the service's CPU time per frame is its own yardstick (issue 62): inferences that take 100x
    longer on the clock (another program's load) ask for nothing; frames that cost far more CPU (a throttled core,
    an engine gone slow) have the engines measured again for real in the background, and the detector names the
    engine that won or says it was confirmed; the lines go through the service's logger."""
    monkeypatch.setattr(chooser, "_LINES_TO_LOG", True)  # as `edge serve` sets it
    _close_race(settings, infer_ms=8.0)
    settled = settings.model_copy(update={"auto_settle_s": 0.0})
    detector = load_detector(DetectorConfig("yolox-nano", backend="auto"), settled)
    faster = None
    try:
        assert detector.backend.key == "tflite"
        assert detector.superseded() is None  # settled: the window opens now
        _infer(detector, 20)
        assert detector.superseded() is None  # the settled figure is taken
        _infer(detector, 20)
        detector.recent_inference_ms.extend([500.0] * 100)  # the clock's figures: what the old check judged by
        assert detector.superseded() is None and not chooser._REMEASURED  # the same CPU per frame: nothing
        _infer(detector, 20, burn_s=0.1)  # each frame now costs 100 ms more CPU than yolox-nano's inference
        with caplog.at_level(logging.INFO, logger="edge.auto"):
            assert detector.superseded() is None  # asked: measuring in the background
            assert chooser._REMEASURED, "a new measurement was asked for"
            deadline = time.monotonic() + 240
            while (faster := detector.superseded()) is None and "measured again" not in detector.backend.notes[0]:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.2)
    finally:
        detector.close()
    said = "measuring yolox-nano again: tflite's frames take "
    assert said in caplog.text and "ms of CPU now" in caplog.text, caplog.text
    assert all(r.name == "edge.auto" for r in caplog.records if "--backend auto" in r.getMessage())
    if faster is not None:  # another engine won: named, as the keeper's log line then says it
        assert faster.split(" on ")[0] in ("onnx", "openvino"), faster


def test_the_live_check_asks_again_only_when_the_services_cpu_per_frame_grew_beyond_its_margin():
    timing = Measurement("onnx", "cpu", "m", 10.0, None, [100.0, 101.0, 99.0], 10.0, 8.0)
    close = AutoChoice("onnx", "cpu", "m", "", key="k", timing=timing, sure=False)
    sure = dataclasses.replace(close, sure=True)
    assert live_check(close, 300.0, None) is None  # not settled: no figure of its own yet, whatever was measured
    assert live_check(close, 11.0, 8.0) is None  # within 1.5x of what it took once settled
    said = "frames take 13 ms of CPU now, 1.6x the 8 ms they took once this service had settled"
    assert live_check(close, 13.0, 8.0) == said
    assert live_check(sure, 13.0, 8.0) is None  # a pick that won every round waits for 2x
    assert live_check(sure, 17.0, 8.0) is not None
    assert live_check(close, 300.0, 250.0) is None  # like with like: the quiet measurement's figures play no part


@pytest.mark.process
@pytest.mark.parametrize("others_now, measured_again", [(0.1, True), (1.0, False)])
def test_a_pick_measured_while_the_machine_was_busy_is_measured_again_at_a_start_that_finds_it_quiet(
    settings: Settings, fresh_bookkeeping: None, monkeypatch: pytest.MonkeyPatch, others_now, measured_again
):
    """A Pi measures at boot, when everything else starts too: a pick stored while other programs kept 1.5 cores
    busy is timed again by a start that finds them quiet, and kept by one that finds them still busy. The machine's
    load now is given (a test cannot make its machine quiet); the measurement is real."""
    _close_race(settings, infer_ms=0.01, others_busy=1.5)
    monkeypatch.setattr(chooser, "_others_now", lambda: others_now)
    choice = auto_choice(every_engine("yolox-nano", settings), settings)
    (entry,) = json.loads(cache_path(settings).read_text()).values()
    assert ({r["infer_ms"] for r in entry["results"]} != {0.01}) is measured_again
    picked = fastest([Measurement(**r) for r in entry["results"]])
    assert picked is not None and choice.backend == picked.backend
    if measured_again:
        assert isinstance(entry["others_busy_cores"], float)  # the new measurement's own load, whatever it was


@pytest.mark.process
def test_a_measurement_keeps_how_busy_other_programs_kept_the_machine(settings: Settings, fresh_bookkeeping: None):
    """Another program (not this process's child: a shell's) spins on a core throughout the measurement."""
    spinner = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'while True: pass' & wait"], start_new_session=True)
    try:
        timing.measure(candidates(every_engine("yolox-nano", settings), settings), "yolox-nano", settings)
    finally:
        os.killpg(spinner.pid, signal.SIGKILL)
        spinner.wait()
    (entry,) = json.loads(cache_path(settings).read_text()).values()
    assert entry["others_busy_cores"] >= figures.BUSY_CORES


def test_auto_says_why_no_measurement_could_be_made_or_kept(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The note said "no measurement could be made or kept" and no more; now it says why, in the same words as the
    error line (here a file stands where the cache's folder should be)."""
    for bookkeeping in ("_FAILED", "_PICKED", "_PICKED_AT"):
        monkeypatch.setattr(chooser, bookkeeping, type(getattr(chooser, bookkeeping))())
    (tmp_path / "blocked").write_text("a file where the cache's folder should be")
    blocked = settings.model_copy(update={"auto_cache": tmp_path / "blocked" / "auto.json"})
    choice = auto_choice(every_engine("yolox-nano", blocked), blocked)
    assert "no measurement could be made or kept (cannot keep the measurement in" in choice.reason, choice.reason
    assert f"{tmp_path / 'blocked'} is a file, not a folder" in choice.reason
