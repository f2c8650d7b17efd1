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
