"""An engine is one module: a new one, installed as a plugin, shows up everywhere without any other edit."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from edge_inference.backends import engine_keys, engines
from edge_inference.backends.discovery import choose_backend, probe_all
from edge_inference.edge.config import ServiceConfig
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.model_files import model_for_engine
from edge_inference.edge.runtime.streams import StreamManager
from tests.conftest import MEDIA, MODELS
from tests.helpers import install_engine_plugin, run_edge

# A real engine in ~20 lines: ONNX Runtime underneath, declared as its own engine with its own device.
TOY_ENGINE = textwrap.dedent(
    """
    import dataclasses

    from edge_inference.backends.engine import Engine, Offer
    from edge_inference.backends.onnxruntime_backend import load as load_onnx


    def probe():
        return ENGINE.status(True, engine="toy 0.1", devices=["toy0  the toy accelerator"])


    def load(path, options):
        backend = load_onnx(path, dataclasses.replace(options, device="cpu"))
        return dataclasses.replace(backend, key="toy", engine="toy 0.1", device="toy0")


    def rank(path):
        return Offer(95, "toy0", "the toy accelerator runs ONNX models") if ENGINE.reads(path.name) else None


    ENGINE = Engine(key="toy", formats=(".onnx",), install="pip install toy-engine", probe=probe, load=load, rank=rank)
    """
)


@pytest.fixture()
def toy_plugin(tmp_path, monkeypatch):
    """The toy engine installed the way a plugin distribution is: a module and an entry point on sys.path."""
    site = install_engine_plugin(tmp_path / "site", "toy", TOY_ENGINE)
    monkeypatch.syspath_prepend(str(site))
    engines.cache_clear()
    yield site
    engines.cache_clear()


def test_a_plugin_engine_appears_in_discovery_auto_the_registry_and_the_loader(toy_plugin, monkeypatch):
    monkeypatch.setenv("EDGE_AUTO_MEASURE", "0")  # auto by the ranking: measured, ONNX Runtime under the toy may win
    assert engine_keys()[-1] == "toy"  # after the built-in ones
    toy = next(s for s in probe_all() if s.key == "toy")
    assert toy.available and toy.devices == ["toy0  the toy accelerator"] and toy.install == "pip install toy-engine"
    choice = choose_backend(MODELS / "onnx/yolox_nano.onnx")  # it outranks the CPU engines for ONNX files
    assert (choice.backend, choice.device) == ("toy", "toy0")
    assert choose_backend(MODELS / "openvino/yolox_nano.xml").backend == "openvino"  # and nothing else
    assert model_for_engine("yolox-nano-tflite", "toy") == ("yolox-nano", None)  # the family's file it reads
    assert model_for_engine("ssd-mobilenet-v2", "toy")[0] == "ssd-mobilenet-v2-onnx"
    detector = load_detector(DetectorConfig("yolox-nano"))
    assert detector.backend.key == "toy" and "auto chose toy on toy0" in detector.backend.notes[0]
    config = ServiceConfig.model_validate(
        {"streams": [{"id": "cam", "source": str(MEDIA / "vtest.avi"), "compare": ["onnx", "toy"]}]}
    )
    assert set(StreamManager(config).pipelines) == {"cam-onnx", "cam-toy"}


@pytest.mark.process
def test_the_command_line_runs_a_plugin_engine(toy_plugin):
    # auto by the engines' own ranking (not by measurement, where ONNX Runtime under the toy may win)
    env = {"PYTHONPATH": os.pathsep.join([str(toy_plugin), os.environ.get("PYTHONPATH", "")]), "EDGE_AUTO_MEASURE": "0"}
    rows = {r["key"]: r for r in json.loads(run_edge("backends", "--json", env=env).stdout)}
    assert rows["toy"]["available"] and {"yolox-nano", "nanodet-m"} <= set(rows["toy"]["models"])
    assert "ssd-mobilenet-v2" not in rows["toy"]["models"]  # a TFLite file: not its format
    proc = run_edge("detect", str(MEDIA / "cat_720p.jpg"), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["backend"] == "toy/toy0" and any(d["label"] == "cat" for d in record["detections"])


# An engine's nature is its declaration: an accelerator names its chip, a CPU engine says its threads are the CPU's.
NATURE_ENGINES = textwrap.dedent(
    """
    import dataclasses

    from edge_inference.backends.engine import Engine, Offer
    from edge_inference.backends.onnxruntime_backend import load as load_onnx


    def probe():
        return None


    def load(path, options):
        backend = load_onnx(path, dataclasses.replace(options, device="cpu"))
        return dataclasses.replace(backend, key=KEY, engine=f"{KEY} 0.1")


    def rank(path):
        return None


    KEY = "{key}"
    ENGINE = Engine(key=KEY, formats=(".onnx",), install="pip install " + KEY, probe=probe, load=load, rank=rank,
                    {declared})
    """
)


@pytest.fixture()
def declared_plugins(tmp_path, monkeypatch):
    site = tmp_path / "site"
    install_engine_plugin(
        site, "memx", NATURE_ENGINES.replace("{key}", "memx").replace("{declared}", "chip=lambda device: 'memx0'")
    )
    install_engine_plugin(
        site, "cpux", NATURE_ENGINES.replace("{key}", "cpux").replace("{declared}", "cpu_threads=True")
    )
    monkeypatch.syspath_prepend(str(site))
    engines.cache_clear()
    yield site
    engines.cache_clear()


def test_a_new_engine_is_an_accelerator_or_a_cpu_engine_by_its_declaration_alone(declared_plugins):
    """A new accelerator (a MemryX, say) runs in a process of its own, its models one process per chip whatever
    the device setting calls it; a new CPU engine's threads are shared by the budget and measured in a loop of
    frames, as ONNX Runtime's are. No other file names them."""
    from edge_inference.backends.base import BackendOptions
    from edge_inference.backends.isolation import chip_owner, runs_isolated
    from edge_inference.edge.detection.model_files import resolve_model
    from edge_inference.edge.detection.opening import plan_opening
    from edge_inference.edge.detection.threads import engine_threads, runs_on_cpu, threads_are_cpu
    from edge_inference.edge.settings import get_settings

    assert runs_isolated("memx", BackendOptions("auto")) and runs_isolated("memx", BackendOptions("memx0"))
    assert chip_owner("memx", BackendOptions("auto")) == chip_owner("memx", BackendOptions("memx0")) is not None
    assert chip_owner("cpux", BackendOptions("auto")) is None and not threads_are_cpu("memx")
    settings = get_settings()
    model = str(MODELS / "onnx/yolox_nano.onnx")
    for key, measured in (("cpux", engine_threads() > 1), ("memx", False)):
        config = DetectorConfig(model, backend=key, isolation="thread")
        opening = plan_opening(config, resolve_model(model, [key], settings).engines[key], settings)
        assert (opening.loop_threads is not None) == measured, key
    detector = load_detector(DetectorConfig(model, backend="cpux", device="cpu", isolation="thread"))
    try:
        assert runs_on_cpu(detector.backend)
    finally:
        detector.close()
