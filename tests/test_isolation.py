"""Engines in processes of their own (backends/isolated.py): real crashes (abort, a NULL read, a hang, the OOM
killer) in a plugin engine end its process, never the service; the other streams keep publishing, the crashed one
is told, comes back by itself, and nothing is left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from edge_inference.backends import BackendOptions, engines
from edge_inference.backends.isolated import EngineCrashed, load_isolated
from edge_inference.backends.isolated_worker import ENGINE_OOM_SCORE_ADJ, first_for_the_oom_killer
from edge_inference.backends.isolation import runs_isolated
from tests.cgroups import memory_limited
from tests.conftest import MODELS, VTEST
from tests.helpers import install_engine_plugin
from tests.inprocess import SSD_ONNX
from tests.server import Server, running_server
from tests.test_watchdogs import wait_for

YOLOX = MODELS / "onnx/yolox_nano.onnx"
CRASHING_ENGINE = Path(__file__).parent / "plugins" / "crashing_engine.py"


@pytest.fixture()
def crashy_site(tmp_path, monkeypatch):
    """The crashing engine installed as a plugin distribution is, on this process's path and a service's."""
    site = install_engine_plugin(tmp_path / "site", "crashy", CRASHING_ENGINE.read_text())
    monkeypatch.syspath_prepend(str(site))
    engines.cache_clear()
    yield site
    engines.cache_clear()


def _importing(*folders: Path) -> dict[str, str]:
    """A service's environment that imports from `folders` too (a plugin's site, a stand-in)."""
    return {"PYTHONPATH": os.pathsep.join([*map(str, folders), os.environ.get("PYTHONPATH", "")])}


def _service_config(tmp_path: Path, how: str, after: int, **crashy: object) -> Path:
    streams = [
        {"id": "steady", "source": str(VTEST), "loop": True, "model": SSD_ONNX, "backend": "onnx"},
        {
            "id": "crashy",
            "source": str(VTEST),
            "loop": True,
            "model": str(YOLOX),
            "backend": "crashy",
            "engine_options": {"crashy": {"how": how, "after": after}},
            **crashy,
        },
    ]
    config = tmp_path / "streams.json"
    config.write_text(json.dumps({"streams": streams}))
    return config


class Watch:
    """Both streams' latest frames and the service's readiness, polled: the longest gap between the steady
    stream's new frames, the crashy stream's frames after its engine died, and what health said meanwhile."""

    def __init__(self, server: Server, death: str, logged: str, crashy: str = "crashy") -> None:
        self.server, self.death, self.logged, self.crashy = server, death, logged, crashy
        self.steady_frame, self.steady_at, self.longest_gap = -1, time.monotonic(), 0.0
        self.crashy_frames: list[int] = []
        self.deaths_seen_at: list[int] = []  # the crashy stream's frame when each death was first in the log
        self.degraded: list[str] = []

    def latest(self, stream: str) -> int | None:
        answer = self.server.client.get(f"/api/v1/streams/{stream}/detections/latest")
        return answer.json()["frame"] if answer.status_code == 200 else None

    def poll(self) -> None:
        now, frame = time.monotonic(), self.latest("steady")
        if frame is not None and frame != self.steady_frame:
            if self.steady_frame >= 0:
                self.longest_gap = max(self.longest_gap, now - self.steady_at)
            self.steady_frame, self.steady_at = frame, now
        crashy = self.latest(self.crashy)
        if crashy is not None:
            self.crashy_frames.append(crashy)
        deaths = self.server.log.count(self.logged)
        while len(self.deaths_seen_at) < deaths:
            self.deaths_seen_at.append(self.crashy_frames[-1] if self.crashy_frames else -1)
        ready = self.server.client.get("/health/ready").json()
        crashy_health = ready.get("streams", {}).get(self.crashy, {})
        if ready["status"] == "degraded" and self.death in json.dumps(crashy_health):
            self.degraded.append(json.dumps(crashy_health))

    def summary(self) -> str:
        return f"deaths seen at the crashy stream's frames {self.deaths_seen_at}, its last {self.crashy_frames[-5:]}"

    def came_back(self, deaths: int) -> bool:
        """`deaths` deaths seen, and the crashy stream published a newer frame after the last of them."""
        self.poll()
        return len(self.deaths_seen_at) >= deaths and self.crashy_frames[-1] > self.deaths_seen_at[deaths - 1] + 3


@pytest.mark.process
@pytest.mark.parametrize(("how", "death"), [("abort", "died: SIGABRT"), ("segfault", "died: SIGSEGV")])
def test_an_engine_that_crashes_ends_its_process_not_the_service(tmp_path, crashy_site, how, death):
    config = _service_config(tmp_path, how, after=40)
    env = _importing(crashy_site)
    with running_server(["--config", str(config)], tmp_path / "log", env=env) as server:
        server.wait_until("/health/live")
        watch = Watch(server, death, f"edge.detectors: the crashy engine (yolox_nano.onnx on crashy0) {death}")
        wait_for(lambda: watch.came_back(2), f"two {how} deaths and frames again after the second", timeout=180)
        assert server.process.poll() is None, server.log
        assert server.client.get("/health/live").status_code == 200
        assert watch.longest_gap < 10, f"the steady stream stopped for {watch.longest_gap:.1f} s"
        assert watch.degraded, "health never said degraded with the engine's death"
        line = f"the crashy engine (yolox_nano.onnx on crashy0) {death}"
        assert line in server.log
        figures = server.client.get("/api/v1/stats").json()["streams"]
        assert figures["steady"]["errors"] == 0, figures["steady"]
        backends = server.client.get("/api/v1/backends").json()
        crashy = next(report for report in backends if report["key"] == "crashy")
        assert any(line in incident for incident in crashy["incidents"]), crashy


@pytest.mark.process
def test_an_engine_that_hangs_is_killed_and_started_again(tmp_path, crashy_site):
    config = _service_config(tmp_path, "hang", after=20, inference_timeout_s=2)
    env = _importing(crashy_site)
    with running_server(["--config", str(config)], tmp_path / "log", env=env) as server:
        server.wait_until("/health/live")
        death = "the crashy engine (yolox_nano.onnx on crashy0) hung: no answer in 2 s; its process was killed"
        watch = Watch(server, death, f"edge.detectors: {death}")
        wait_for(lambda: watch.came_back(1), "a hang, its process killed, and frames again", timeout=180)
        figures = server.client.get("/api/v1/stats").json()["streams"]["crashy"]
        assert figures["frames_dropped"] >= 1, figures  # the frame in the hung inference: dropped, not published
        assert watch.longest_gap < 10, f"the steady stream stopped for {watch.longest_gap:.1f} s"


@pytest.mark.process
def test_an_engine_that_hangs_while_loading_is_killed_at_the_deadline(crashy_site):
    """A driver that never answers while it opens the device (SIGSTOP on a worker while it loaded: down for as long
    as it was stopped): the load ends at its deadline with one line, the process killed, and the keeper retries."""
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    options = BackendOptions(engine_options={"how": "hang-loading"}, load_deadline_s=3)
    with pytest.raises(EngineCrashed, match=r"had not loaded yolox_nano.onnx after 3 s \(a driver or device that"):
        load_isolated("crashy", YOLOX, options)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.status() != "zombie"]
    assert not left, left


# The kernel can kill a second process in a cgroup before the first one's memory is freed: seen here under CPU load,
# dmesg had the service killed 5 ms after its engine, the dying engine no longer among the candidates and the cgroup
# still full. Nothing a service does keeps it from that choice (exempting it needs CAP_SYS_RESOURCE, which even root
# lacks in a container); systemd's Restart= starts it again. Such a run is told by two OOM kills and the service
# ended by SIGKILL, and run again: what is tested is what the service does with its engine's death.
OOM_TRIES = 3
# Taking 900 MB page by page is the engine's last inference. Where page faults are dear (a slow or virtualised CPU,
# here 0.25 of a core), that ran past the 10 s hang watchdog every time: each run was killed as hung, never by the
# kernel. The watchdog has a test of its own above; here it waits past any such pace.
OOM_INFERENCE_TIMEOUT_S = 150


@pytest.mark.process
def test_an_engine_the_oom_killer_ends_is_said_to_be_out_of_memory(tmp_path, crashy_site):
    kernel_took_the_service_too = []
    for attempt in range(OOM_TRIES):
        folder = tmp_path / f"try{attempt}"
        folder.mkdir()
        outcome = _engine_killed_for_memory(folder, crashy_site)
        if outcome is None:
            return
        kernel_took_the_service_too.append(outcome)
    pytest.fail(f"each of {OOM_TRIES} runs lost the service to a second OOM kill: {kernel_took_the_service_too}")


def _engine_killed_for_memory(tmp_path: Path, crashy_site: Path) -> str | None:
    """The crashy engine takes memory until the OOM killer ends it in the service's memory cgroup: the death is said
    to be out of memory and the stream comes back, the service up throughout. None when so; where the kernel killed
    the service as well, what it did."""
    config = _service_config(tmp_path, "oom", after=10, inference_timeout_s=OOM_INFERENCE_TIMEOUT_S)
    env = _importing(crashy_site)
    with (
        memory_limited(900 << 20) as cgroup,
        running_server(["--config", str(config)], tmp_path / "log", env=env) as server,
    ):
        cgroup.add(server.process.pid)  # before it loads any engine: the children start inside too
        server.wait_until("/health/live")
        death = "died: killed: out of memory"
        watch = Watch(server, death, f"edge.detectors: the crashy engine (yolox_nano.onnx on crashy0) {death}")

        def back_or_ended() -> bool:
            if server.process.poll() is not None:
                return True
            with contextlib.suppress(httpx.HTTPError):  # the service killed during a request: poll() says so next
                return watch.came_back(1)
            return False

        wait_for(
            back_or_ended,
            "an OOM kill said as such, and frames again",
            timeout=OOM_INFERENCE_TIMEOUT_S + 150,
            seen=lambda: f"{watch.summary()}; the service's log ends:\n{server.log[-3000:]}",
        )
        ended, kills = server.process.poll(), cgroup.oom_kills()
        if ended == -signal.SIGKILL and kills >= 2:
            return f"{kills} OOM kills, the service's among them"
        assert ended is None, f"the service ended ({ended}): {server.log[-3000:]}"
    return None


@pytest.mark.process
def test_an_engines_process_is_the_oom_killers_first_choice_not_the_service(crashy_site, tmp_path):
    """The OOM killer takes the process with the highest score: an engine's process raises its own, so that memory
    running out ends one stream's engine, which comes back by itself, rather than the service with every stream.
    Only ever raised (no privilege needed): a higher value given to the whole service stands."""
    options = BackendOptions(device="cpu", threads=1, engine_options={"how": "none"})
    backend = load_isolated("crashy", YOLOX, options)
    try:
        assert backend.child is not None
        engine = int(Path(f"/proc/{backend.child.host.process.pid}/oom_score_adj").read_text())
    finally:
        backend.close()
    assert engine == ENGINE_OOM_SCORE_ADJ > int(Path("/proc/self/oom_score_adj").read_text())
    adjust = tmp_path / "oom_score_adj"
    for before, after in [("0", ENGINE_OOM_SCORE_ADJ), ("-1000", ENGINE_OOM_SCORE_ADJ), ("800", 800)]:
        adjust.write_text(before)
        first_for_the_oom_killer(adjust)
        assert int(adjust.read_text()) == after, before


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[1] == me:
                found.append(int(entry.name))
    return found


@pytest.mark.process
def test_twenty_crashes_in_a_row_leave_no_process_memory_block_or_descriptor(crashy_site):
    tensor = np.zeros((1, 3, 416, 416), np.float32)
    options = BackendOptions(device="cpu", threads=1, engine_options={"how": "abort", "after": 2})
    shm_before, fds_before = set(os.listdir("/dev/shm")), len(os.listdir("/proc/self/fd"))
    children_before = _children()
    for _ in range(20):
        backend = load_isolated("crashy", YOLOX, options)
        backend.run(tensor)
        with pytest.raises(EngineCrashed, match="SIGABRT"):
            backend.run(tensor)
        backend.close()
    assert _children() == children_before
    assert _left_behind(set(os.listdir("/dev/shm")) - shm_before) == []
    assert len(os.listdir("/proc/self/fd")) == fds_before


# The Triton tests' server (PyTriton, in other workers) keeps blocks in /dev/shm between requests, unmapped at
# times: Python's multiprocessing.shared_memory names them psm_..., PyTriton its own pytrtion<pid>-.... The project
# makes neither (`test_the_project_makes_no_named_shared_memory` below): none of them can be a crashed engine's.
OTHERS_SEGMENTS = ("psm_", "pytrtion")


def _left_behind(names: set[str]) -> list[str]:
    """Of /dev/shm entries that appeared, those no live process maps: left behind. Other tests' servers running
    meanwhile (a Triton's regions, PyTriton's blocks) hold theirs mapped; a crashed engine's would be no one's."""
    names = {name for name in names if not name.startswith(OTHERS_SEGMENTS)}
    if not names:
        return []
    held = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            held |= {
                line.rsplit("/dev/shm/", 1)[1].split(" ")[0]
                for line in maps.read_text().splitlines()
                if "/dev/shm/" in line
            }
    return sorted(name for name in names if name not in held and (Path("/dev/shm") / name).exists())


def test_accelerators_and_plugins_run_isolated_cpu_engines_as_measured(crashy_site):
    cpu = BackendOptions(device="cpu")
    assert runs_isolated("crashy", cpu)  # a plugin: nobody here has read its code
    for engine in ("edgetpu", "hailo", "rknn"):
        assert runs_isolated(engine, BackendOptions())
    assert runs_isolated("onnx", BackendOptions(device="cuda"))
    assert runs_isolated("openvino", BackendOptions(device="GPU"))
    assert not runs_isolated("onnx", cpu) and not runs_isolated("tflite", cpu) and not runs_isolated("openvino", cpu)
    assert runs_isolated("onnx", BackendOptions(device="cpu", isolation="process"))
    assert not runs_isolated("crashy", BackendOptions(device="cpu", isolation="thread"))


@pytest.mark.process
def test_streams_on_one_isolated_engine_share_its_one_process(tmp_path, crashy_site):
    """The split must not cost memory per stream: three streams on one model and engine, one engine process."""
    import psutil

    streams = [
        {"id": f"cam{i}", "source": str(VTEST), "loop": True, "model": str(YOLOX), "backend": "crashy"}
        | {"engine_options": {"crashy": {"how": "none"}}}
        for i in range(3)
    ]
    config = tmp_path / "streams.json"
    config.write_text(json.dumps({"streams": streams}))
    env = _importing(crashy_site)
    with running_server(["--config", str(config)], tmp_path / "log", env=env) as server:
        server.wait_until("/health/ready", timeout=120)
        for i in range(3):
            server.wait_for_frames(f"cam{i}", 5, timeout=120)
        workers = [
            child
            for child in psutil.Process(server.process.pid).children(recursive=True)
            if "edge_inference.backends.isolated_worker" in " ".join(child.cmdline())
        ]
        assert len(workers) == 1, [w.cmdline() for w in workers]


@pytest.mark.process
def test_a_coral_pulled_out_mid_stream_aborts_its_engine_and_comes_back_when_plugged_in(tmp_path):
    """The issue's case end to end: libedgetpu answers a transfer to a stick that is gone with LOG(FATAL) and an
    abort (usb_driver.cc). With the Edge TPU engine in its own process (the default), the Coral stream says so, its
    loads fail while the stick is out ("no Edge TPU found", retried at the backoff's pace) and it runs again once the
    stick is back; the other stream never stops. The stand-ins: tflite_runtime 2.17.1's and a libedgetpu built here
    (tests/test_accelerator_engines.py)."""
    from tests.test_accelerator_engines import CORAL_FAKES, EDGETPU_MODEL, LIBEDGETPU_STAND_IN

    if subprocess.run(["cc", "--version"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no C compiler to build the libedgetpu stand-in")
    source, library, plugged = tmp_path / "edgetpu.c", tmp_path / "libedgetpu.so.1", tmp_path / "usb-plugged"
    source.write_text(LIBEDGETPU_STAND_IN)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    plugged.touch()
    streams = [
        {"id": "steady", "source": str(VTEST), "loop": True, "model": SSD_ONNX, "backend": "onnx"},
        {"id": "coral", "source": str(VTEST), "loop": True, "model": str(EDGETPU_MODEL), "backend": "edgetpu"},
    ]
    config = tmp_path / "streams.json"
    config.write_text(json.dumps({"streams": streams}))
    env = {
        **_importing(CORAL_FAKES),
        "EDGE_LIBEDGETPU": str(library),
        "STUB_TPU": str(plugged),
        "EDGE_SYSROOT": str(tmp_path / "root"),  # no Coral on the bus once pulled
        "EDGE_MODEL_CACHE": str(tmp_path / "cache"),
    }
    with running_server(["--config", str(config)], tmp_path / "log", env=env) as server:
        server.wait_until("/health/live")
        watch = Watch(server, "died: SIGABRT", "edge.detectors: the edgetpu engine", crashy="coral")
        wait_for(
            lambda: (watch.poll(), bool(watch.crashy_frames) and watch.crashy_frames[-1] > 5)[1], "Coral frames", 120
        )
        plugged.unlink()  # the stick pulled out
        wait_for(lambda: "cannot use the Edge TPU: no Edge TPU found" in server.log, "its loads refused", timeout=120)
        assert "bulk out for" in server.log and "Abort." in server.log  # libedgetpu's own last words, in the log
        refused_at = (watch.poll(), watch.crashy_frames[-1])[1]
        plugged.touch()  # and back in
        wait_for(lambda: (watch.poll(), watch.crashy_frames[-1] > refused_at + 5)[1], "Coral frames again", 180)
        assert watch.longest_gap < 10, f"the steady stream stopped for {watch.longest_gap:.1f} s"
        backends = server.client.get("/api/v1/backends").json()
        edgetpu = next(report for report in backends if report["key"] == "edgetpu")
        assert any("died: SIGABRT" in incident for incident in edgetpu["incidents"]), edgetpu["incidents"]


@pytest.mark.process
def test_an_engine_whose_inferences_keep_failing_is_started_anew(tmp_path, crashy_site):
    """A device error that sticks to the process (a CUDA context after an illegal address) raises on every
    inference and never kills anything: after five in a row the engine's process is ended and started again."""
    config = _service_config(tmp_path, "raise", after=40)
    env = _importing(crashy_site)
    with running_server(["--config", str(config)], tmp_path / "log", env=env) as server:
        server.wait_until("/health/live")
        death = "died: 5 inferences in a row failed (CUDA error: an illegal memory access was encountered)"
        watch = Watch(server, death, f"edge.detectors: the crashy engine (yolox_nano.onnx on crashy0) {death}")
        wait_for(lambda: watch.came_back(1), "a restart after failures in a row, and frames again", timeout=180)


@pytest.mark.process
def test_isolation_is_set_per_engine_in_the_config_and_per_stream(crashy_site):
    """`detectors: {isolation: {onnx: process}}` puts every ONNX Runtime stream's engine in a process of its own; a
    stream's own `isolation: thread` keeps its engine here."""
    from edge_inference.backends.isolated import IsolatedBackend
    from edge_inference.edge.config import ServiceConfig
    from tests.inprocess import app_client, wait_ready

    streams = [
        {"id": "apart", "source": str(VTEST), "loop": True, "model": SSD_ONNX, "backend": "onnx", "device": "cpu"},
        {"id": "here", "source": str(VTEST), "loop": True, "model": str(YOLOX), "backend": "crashy"}
        | {"isolation": "thread", "engine_options": {"crashy": {"how": "none"}}},
    ]
    config = ServiceConfig.model_validate({"detectors": {"isolation": {"onnx": "process"}}, "streams": streams})
    with app_client(config) as client:
        wait_ready(client)
        manager = client.app.state.manager  # type: ignore[attr-defined]
        kinds = {shared.backend.key: type(shared.backend) for shared in manager.detectors.engines()}
        assert kinds["onnx"] is IsolatedBackend and kinds["crashy"] is not IsolatedBackend, kinds


def test_doctor_says_which_engine_died_last(tmp_path):
    """What `edge doctor` reads after the fact: the deaths the service recorded in the model cache."""
    from edge_inference.backends.isolated import Incident, remember
    from edge_inference.edge.settings import Settings
    from edge_inference.edge.tools.doctor import check_engine_deaths

    cache = tmp_path / "cache"
    for how in ("SIGABRT", "killed: out of memory"):
        remember(Incident(time.time(), "edgetpu", "ssd_edgetpu.tflite", "edgetpu:usb", how), cache)
    findings = list(check_engine_deaths(Settings(model_cache=cache)))
    assert [f.status for f in findings] == ["warn", "warn"]
    assert findings[-1].detail.endswith(
        "the edgetpu engine (ssd_edgetpu.tflite on edgetpu:usb) died: killed: out of memory"
    )
    assert list(check_engine_deaths(Settings(model_cache=tmp_path / "none"))) == []


def test_the_project_makes_no_named_shared_memory():
    """Engine processes pass tensors in anonymous memory (memfd), which nothing can leave behind in /dev/shm; named
    segments (Python's multiprocessing.shared_memory) would be, when a process dies holding one. Only the Triton
    engine names regions, for the server to map, and removes them as it closes."""
    from tests.conftest import REPO

    found = [
        str(path.relative_to(REPO))
        for folder in ("backends", "edge", "models", "service", "cli")
        for path in (REPO / folder).rglob("*.py")
        if "shared_memory.SharedMemory" in path.read_text(encoding="utf-8")
        or "from multiprocessing import shared_memory" in path.read_text(encoding="utf-8")
    ]
    assert not found, found


def test_a_message_longer_than_a_datagram_passes_whole_with_its_descriptors():
    """A worker's reply over 64 KiB (a class list) was cut at the datagram's size: `pickle data was truncated`."""
    import socket

    from edge_inference.backends.isolated_worker import MESSAGE_BYTES, receive, send

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    reading, writing = os.pipe()
    try:
        for size in (10, MESSAGE_BYTES - 100, MESSAGE_BYTES * 3):
            message = {"names": "x" * size, "n": size}
            send(ours, message, [writing])
            got, fds = receive(theirs)
            assert got == message and len(fds) == 1
            os.write(fds[0], b"!")
            os.close(fds[0])
            assert os.read(reading, 1) == b"!"
    finally:
        for end in (ours, theirs):
            end.close()
        os.close(reading)
        os.close(writing)


@pytest.mark.process
def test_a_model_with_a_class_list_of_98_kb_loads_in_a_process_of_its_own(tmp_path):
    onnx = pytest.importorskip("onnx")
    model = onnx.load(YOLOX)
    names = {i: f"class number {i} of a large taxonomy" for i in range(2500)}
    onnx.helper.set_model_props(model, {"names": repr(names)})
    path = tmp_path / "taxonomy.onnx"
    onnx.save(model, path)
    assert len(repr(names)) > 95_000
    backend = load_isolated("onnx", path, BackendOptions())
    try:
        assert backend.metadata["names"] == repr(names)
        tensor = np.zeros(backend.inputs[0].shape, np.float32)
        assert backend.run(tensor)[0].shape == tuple(backend.outputs[0].shape)
    finally:
        backend.close()


def test_one_chip_has_one_owner_whatever_its_device_setting_says(tmp_path, monkeypatch):
    """`auto`, `edgetpu`, `usb`, `usb:0` and `:0` on a box with one Coral started a process each, each opening the
    one chip; a Hailo's or an NPU's settings likewise. Two Corals stay two owners."""
    from edge_inference.backends.isolation import chip_owner
    from tests import fake_devices

    fake_devices.usb_device(tmp_path, "1-1", "18d1", "9302", "5000")
    monkeypatch.setenv("EDGE_SYSROOT", str(tmp_path))
    names = ("auto", "edgetpu", "", "usb", "usb:0", ":0", "USB:0")
    assert len({chip_owner("edgetpu", BackendOptions(name)) for name in names}) == 1
    for engine, settings in (("hailo", ("auto", "hailo", "hailo:0")), ("rknn", ("auto", "npu0", "npu:0_1_2"))):
        assert len({chip_owner(engine, BackendOptions(name)) for name in settings}) == 1, engine
    fake_devices.usb_device(tmp_path, "1-2", "18d1", "9302", "5000")
    assert chip_owner("edgetpu", BackendOptions("usb:0")) != chip_owner("edgetpu", BackendOptions("usb:1"))
    assert chip_owner("onnx", BackendOptions("cuda:0")) is None  # a process per model: no chip to share


@pytest.mark.process
def test_a_stream_whose_engine_hangs_while_loading_says_so_and_the_other_stream_goes_on(tmp_path, crashy_site):
    """SIGSTOP on a worker while it loaded held its stream down for as long as it was stopped, health saying
    "starting it again now": a stream's `load_timeout_s` ends the load, and the load is tried again with backoff."""
    config = _service_config(tmp_path, "hang-loading", after=1, load_timeout_s=3)
    with running_server(["--config", str(config)], tmp_path / "log", env=_importing(crashy_site)) as server:
        server.wait_until("/health/live")
        said = "had not loaded yolox_nano.onnx after 3 s (a driver or device that hangs)"
        wait_for(
            lambda: said in (server.client.get("/api/v1/streams/crashy").json().get("error") or ""),
            "the hung load's line", timeout=120, seen=lambda: server.client.get("/api/v1/streams/crashy").json(),
        )  # fmt: skip
        steady = server.client.get("/api/v1/stats").json()["streams"]["steady"]["frames_processed"]
        wait_for(lambda: server.client.get("/api/v1/stats").json()["streams"]["steady"]["frames_processed"] > steady,
                 "the steady stream's frames", timeout=60)  # fmt: skip
        assert "retrying in" in server.client.get("/api/v1/streams/crashy").json()["error"]
        assert "Traceback" not in server.log
