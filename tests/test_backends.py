"""Every backend up to the hardware this machine has, and the message a user without the hardware gets."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge_inference.backends import BackendError, BackendOptions, open_backend
from edge_inference.backends.discovery import choose_backend, probe_all
from edge_inference.backends.edgetpu_backend import NO_DEVICE, diagnose, parse_device
from edge_inference.backends.hardware import coral_pcie_devices, coral_usb_devices, nvidia_gpus
from edge_inference.backends.tflite_backend import create_interpreter, is_edgetpu_model
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.models.overrides import SpecOverrides
from edge_inference.models.resolve import ModelIO, resolve_spec
from tests.conftest import MODELS
from tests.helpers import provider_starts_here, run_edge

TFLITE = MODELS / "tflite"
EDGETPU_TWINS = {
    "ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite": "ssd_mobilenet_v2_coco_quant_postprocess.tflite",
    "yolov8n_full_integer_quant_edgetpu.tflite": "yolov8n_full_integer_quant.tflite",
    "yolov8n_full_integer_quant_320_edgetpu.tflite": "yolov8n_full_integer_quant_320.tflite",
}


# -- Edge TPU ----------------------------------------------------------------------------------------------------
def op_names(interpreter) -> set[str]:
    """The graph's operators as LiteRT parsed them: an independent check of the byte scan in is_edgetpu_model."""
    return {op["op_name"] for op in interpreter._get_ops_details()}


@pytest.mark.parametrize("tpu_file", sorted(EDGETPU_TWINS))
def test_edgetpu_models_are_recognised_and_match_their_cpu_twins(tpu_file):
    tpu, cpu = TFLITE / tpu_file, TFLITE / EDGETPU_TWINS[tpu_file]
    assert is_edgetpu_model(tpu) and not is_edgetpu_model(cpu)
    tpu_interp, _ = create_interpreter(tpu, None)  # loads without a TPU; only allocation needs one
    cpu_interp, _ = create_interpreter(cpu, None)
    assert "edgetpu-custom-op" in op_names(tpu_interp) and "edgetpu-custom-op" not in op_names(cpu_interp)
    cpu_interp.allocate_tensors()

    def io(interp):
        inp = interp.get_input_details()[0]
        outs = interp.get_output_details()
        return inp, outs

    (tin, touts), (cin, couts) = io(tpu_interp), io(cpu_interp)
    assert tin["shape"].tolist() == cin["shape"].tolist() and tin["dtype"] == cin["dtype"]
    assert tin["quantization"] == cin["quantization"]
    # The same model description (so the same pre- and post-processing) results from either file.
    specs = [
        resolve_spec(
            "m",
            ModelIO(tuple(i["shape"]), [tuple(o["shape"]) for o in outs], [o["name"] for o in outs], {}),
            SpecOverrides(),
        )
        for i, outs in ((tin, touts), (cin, couts))
    ]
    assert specs[0] == specs[1]


@pytest.mark.process
def test_cpu_twin_runs_the_same_pipeline(photos):
    detector = load_detector(DetectorConfig(str(TFLITE / "ssd_mobilenet_v2_coco_quant_postprocess.tflite")))
    assert detector.backend.key == "tflite" and detector.spec.decoder == "ssd"
    assert "cat" in [d.label for d in detector.detect(photos["chelsea"]).detections]


@pytest.mark.process
def test_edgetpu_without_runtime_says_how_to_install(monkeypatch):
    monkeypatch.delenv("EDGE_LIBEDGETPU", raising=False)
    if ctypes.util.find_library("edgetpu"):
        pytest.skip("libedgetpu is installed on this machine")
    with pytest.raises(BackendError, match="libedgetpu1-std"):
        open_backend("edgetpu", TFLITE / "ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite", BackendOptions())


def test_fake_delegate_library_is_named(tmp_path, monkeypatch):
    fake = tmp_path / "libedgetpu.so.1"
    fake.write_text("not a shared library")
    monkeypatch.setenv("EDGE_LIBEDGETPU", str(fake))
    with pytest.raises(BackendError, match=r"libedgetpu.so.1 is not a loadable Edge TPU library"):
        open_backend("edgetpu", TFLITE / "yolov8n_full_integer_quant_320_edgetpu.tflite", BackendOptions("usb"))


@pytest.mark.process
def test_a_library_that_is_not_a_delegate_is_named(monkeypatch):
    libm = ctypes.util.find_library("m")  # a real shared library that loads, but is no TFLite delegate
    monkeypatch.setenv("EDGE_LIBEDGETPU", libm)
    with pytest.raises(BackendError, match="is not a TFLite delegate library"):
        open_backend("edgetpu", TFLITE / "ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite", BackendOptions())


def test_cpu_model_on_the_tpu_and_tpu_model_on_the_cpu_are_refused():
    with pytest.raises(BackendError, match=r"not compiled for the Edge TPU.*edgetpu_compiler"):
        open_backend("edgetpu", TFLITE / "ssd_mobilenet_v2_coco_quant_postprocess.tflite", BackendOptions())
    with pytest.raises(BackendError, match=r"compiled for the Coral Edge TPU.*--backend edgetpu"):
        open_backend("tflite", TFLITE / "ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite", BackendOptions())


def _fake_usb(root: Path, name: str, vendor: str, product: str, speed: str = "5000") -> None:
    """A USB device as sysfs shows it, inside a fake system root."""
    device = root / "sys/bus/usb/devices" / name
    device.mkdir(parents=True)
    (device / "idVendor").write_text(vendor + "\n")
    (device / "idProduct").write_text(product + "\n")
    (device / "speed").write_text(speed + "\n")


def test_coral_discovery_by_usb_ids_and_apex_nodes(tmp_path):
    _fake_usb(tmp_path, "2-1", "1a6e", "089a", "480")
    _fake_usb(tmp_path, "2-2", "18d1", "9302")
    _fake_usb(tmp_path, "1-1", "046d", "0825")  # a webcam
    found = coral_usb_devices(tmp_path)
    assert len(found) == 2 and found[0].startswith("usb:0") and "firmware not loaded" in found[0]
    assert "480 Mbit/s" in found[0] and found[1].startswith("usb:1  Coral USB Accelerator at 2-2")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/apex_0").touch()
    assert coral_pcie_devices(tmp_path) == ["pci:0  /dev/apex_0"]
    absent = tmp_path / "absent"
    assert coral_usb_devices(absent) == [] and nvidia_gpus(absent) == [] and coral_pcie_devices(absent) == []


@pytest.mark.process
def test_device_names_and_diagnosis(monkeypatch, tmp_path):
    assert [parse_device(d) for d in ("auto", "usb", "usb:1", "pci:0", ":0")] == [None, "usb", "usb:1", "pci:0", ":0"]
    with pytest.raises(BackendError, match="usb, usb:N, pci, pci:N"):
        parse_device("coral")
    libm = ctypes.util.find_library("m")
    monkeypatch.setenv("EDGE_SYSROOT", str(tmp_path))  # a machine with no accelerator at all
    assert diagnose(libm, None) == NO_DEVICE
    _fake_usb(tmp_path, "2-1", "18d1", "9302")
    assert "asked for usb:1 but found 1 USB" in diagnose(libm, "usb:1")
    assert "did not respond" in diagnose(libm, "usb:0")


# -- OpenVINO ----------------------------------------------------------------------------------------------------
def test_openvino_reads_onnx_ir_and_tflite():
    for path in (
        MODELS / "onnx/yolox_nano.onnx",
        MODELS / "openvino/yolox_nano.xml",
        TFLITE / "yolox_nano_float16_quantize.tflite",
    ):
        backend = open_backend("openvino", path, BackendOptions("CPU"))
        assert backend.device == "CPU" and backend.outputs[0].shape == (1, 3549, 85)
        out = backend.run(np.zeros((1, 3, 416, 416), np.float32))
        assert out[0].shape == (1, 3549, 85)


def test_openvino_int8_tflite_gets_its_scales_from_the_file():
    backend = open_backend("openvino", TFLITE / "yolov8n_full_integer_quant_320.tflite", BackendOptions("CPU"))
    assert backend.inputs[0].dtype == np.int8 and backend.inputs[0].quantization is not None
    assert backend.outputs[0].quantization.zero_point == -128


def test_a_backend_named_as_other_tools_name_it_runs_or_is_answered_with_our_name(tmp_path):
    """`ONNX` and `Auto` in any case run as `onnx` and `auto`, in a config too; Frigate's detector types (`coral`,
    `tensorrt`, `hailo8l`), an NCS2's `MYRIAD` and `pytorch` are answered with how they are written here."""
    from edge_inference.edge.config import ConfigError, load_config

    detector = load_detector(DetectorConfig(str(MODELS / "onnx/yolox_nano.onnx"), backend="ONNX"))
    try:
        assert detector.description["engine"].startswith("onnxruntime"), detector.description
    finally:
        detector.close()
    config = tmp_path / "streams.yaml"
    config.write_text("streams:\n  - {id: a, source: 0, backend: OpenVINO, compare: [ONNX, OpenVINO:CPU]}\n")
    stream = load_config(config).streams[0]
    assert (stream.backend, stream.compare) == ("openvino", ["onnx", "openvino:CPU"])
    for name, fragment in [
        ("coral", "a Coral is backend edgetpu"),
        ("MYRIAD", "backend openvino, device MYRIAD, which OpenVINO dropped after 2022.3 LTS"),
        ("tensorrt", "backend onnx, device tensorrt"),
        ("hailo8l", "is backend hailo"),
        ("pytorch", "export the model to ONNX"),
    ]:
        config.write_text(f"streams:\n  - {{id: a, source: 0, backend: {name}}}\n")
        with pytest.raises(ConfigError, match=f"unknown backend .{name}. \\(.*{fragment}"):
            load_config(config)


def test_myriad_and_missing_devices_are_explained():
    model = MODELS / "onnx/yolox_nano.onnx"
    with pytest.raises(BackendError) as info:
        open_backend("openvino", model, BackendOptions("MYRIAD"))
    assert "removed after OpenVINO 2022.3 LTS" in str(info.value) and "openvino==2022.3" in str(info.value)
    with pytest.raises(BackendError, match=r"sees no NPU here.*NPU driver"):
        open_backend("openvino", model, BackendOptions("NPU"))
    with pytest.raises(BackendError, match="sees no GPU here"):
        open_backend("openvino", model, BackendOptions("GPU"))
    with pytest.raises(BackendError, match="no device 'TPU'"):
        open_backend("openvino", model, BackendOptions("TPU"))
    with pytest.raises(BackendError, match=r"TFLite_Detection_PostProcess operation.*--backend tflite"):
        open_backend("openvino", TFLITE / "ssd_mobilenet_v2_coco_quant_postprocess.tflite", BackendOptions("CPU"))


# -- ONNX Runtime execution providers ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("device", "provider"),
    [
        ("cuda:0", "CUDAExecutionProvider"),
        ("tensorrt", "TensorrtExecutionProvider"),
        ("openvino", "OpenVINOExecutionProvider"),
    ],
)
def test_a_provider_runs_where_it_starts_and_is_refused_or_falls_back_where_not(device, provider):
    model = MODELS / "onnx/yolox_nano.onnx"
    if provider_starts_here(provider, model):  # a GPU machine: what really ran
        backend = open_backend("onnx", model, BackendOptions(device))
        assert backend.session.get_providers()[0] == provider and backend.device.startswith(f"{provider}:")
        assert not backend.notes
        return
    with pytest.raises(BackendError, match=rf"{provider}.*--fallback"):
        open_backend("onnx", model, BackendOptions(device))
    backend = open_backend("onnx", model, BackendOptions(device, allow_fallback=True))
    ran = backend.session.get_providers()[0]
    assert ran != provider and backend.device.startswith(ran) and provider in backend.notes[0]


# -- discovery and auto ------------------------------------------------------------------------------------------
@pytest.mark.process
def test_discovery_lists_every_backend_with_its_state():
    statuses = {s.key: s for s in probe_all()}
    assert set(statuses) == {"onnx", "tflite", "edgetpu", "openvino", "hailo", "rknn", "triton"}
    assert statuses["onnx"].available and "cpu" in statuses["onnx"].devices
    assert statuses["openvino"].available and any(d.startswith("CPU") for d in statuses["openvino"].devices)
    # with or without a Coral plugged in: available exactly when nothing is in the way, else the reason is given
    edgetpu = statuses["edgetpu"]
    assert edgetpu.available == (edgetpu.problem is None) and (edgetpu.available or edgetpu.problem)
    for accelerator in ("hailo", "rknn", "edgetpu"):  # unavailable here unless runtime and device are both present
        assert statuses[accelerator].available == (statuses[accelerator].problem is None)
    proc = run_edge("backends", "--json")
    rows = {r["key"]: r for r in json.loads(proc.stdout)}
    assert "ssd-mobilenet-v2-edgetpu" in rows["edgetpu"]["models"] and "yolox-nano" in rows["onnx"]["models"]
    assert "ssd-mobilenet-v2" not in rows["openvino"]["models"]


def test_auto_picks_an_engine_and_says_why():
    onnx = choose_backend(MODELS / "onnx/yolox_nano.onnx")
    statuses = {s.key: s for s in probe_all()}
    cuda = [d for d in statuses["onnx"].devices if d.startswith("cuda")]
    accelerators = [d.split()[0] for d in statuses["openvino"].devices if not d.startswith("CPU")]
    if cuda:  # a machine with an NVIDIA GPU and onnxruntime-gpu
        assert (onnx.backend, onnx.device) == ("onnx", cuda[0].split()[0]) and "CUDA" in onnx.reason
    elif accelerators:  # an Intel GPU or NPU
        assert (onnx.backend, onnx.device) == ("openvino", accelerators[0])
    else:
        assert (onnx.backend, onnx.device) == ("onnx", "cpu") and "no GPU or NPU" in onnx.reason
    assert choose_backend(MODELS / "openvino/yolox_nano.xml").backend == "openvino"
    assert choose_backend(TFLITE / "yolox_nano_float16_quantize.tflite").backend == "tflite"
    assert choose_backend(TFLITE / "ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite").backend == "edgetpu"
    detector = load_detector(DetectorConfig(str(MODELS / "openvino/yolox_nano.xml")))
    assert detector.backend.key == "openvino" and detector.backend.notes[0].startswith("--backend auto chose openvino")


def test_litert_notice_is_hidden_and_nothing_else_written_meanwhile_is_lost(capfd):
    """LiteRT prints an INFO line on stderr when it applies XNNPACK; it is dropped, other output is kept."""
    from edge_inference.backends.tflite_backend import XNNPACK_NOTICE, without_xnnpack_notice

    with without_xnnpack_notice():
        os.write(2, b"a log line from another thread\n" + XNNPACK_NOTICE)
    assert capfd.readouterr().err == "a log line from another thread\n"
    detector = load_detector(DetectorConfig(str(TFLITE / "ssd_mobilenet_v2_coco_quant_postprocess.tflite"), "tflite"))
    detector.warmup()
    detector.close()
    assert "XNNPACK" not in capfd.readouterr().err


@pytest.mark.process
def test_openvino_sends_nothing_home_and_writes_nothing_in_the_users_home(tmp_path):
    """`import openvino` sent a Google Analytics event from a process it forked and wrote a client id under ~/intel
    (its converter's telemetry, on by default): a camera box sends nothing it was not asked to."""
    program = (
        "from edge_inference.backends.openvino_backend import import_openvino; import_openvino(); "
        "import nncf, openvino.tools.ovc.telemetry_utils as used; print(used.tm.__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        env={**os.environ, "HOME": str(tmp_path), "CI": ""},  # OpenVINO sends nothing where CI=true
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "openvino.tools.ovc.telemetry_stub"
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


@pytest.mark.parametrize(("name", "what"), [("cat_720p.jpg", "an image"), ("vtest.avi", "a video")])
def test_an_image_or_video_given_as_the_model_is_said_to_be_no_model(name, what):
    """`--model photo.jpg` (the source meant) said "no installed engine can run it", as if one could be installed."""
    from edge_inference.backends.engine import choose

    with pytest.raises(BackendError, match=rf"{name} is {what}, not a model: give --model a model file"):
        choose(Path(name))
