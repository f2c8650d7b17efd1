"""The accelerator engines through `load` and `run`, against stand-ins that copy the vendors' runtimes (tests/fakes:
pyhailort 4.13 and 4.20, RKNNLite 2.3.2, ONNX Runtime's own provider normalisation), and each engine's options.
Where the real runtime and device are present these engines are exercised by test_npu_backends and test_backends."""

from __future__ import annotations

import ctypes.util
import json
import logging
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge_inference.backends import Backend, BackendError, BackendOptions, get_engine, open_backend
from edge_inference.edge.config import ConfigError, load_config
from edge_inference.edge.detection.detector import Detector
from edge_inference.edge.detection.detector_pool import DetectorPool, describe_engine
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.settings import Settings
from tests import fake_devices
from tests.conftest import MODELS, VTEST, skimage_photo
from tests.fakes import onnxruntime_gpu
from tests.helpers import provider_starts_here, run_edge

FAKES = Path(__file__).parent / "fakes"
YOLOV8N = MODELS / "onnx" / "yolov8n_int8.onnx"
YOLOX = MODELS / "onnx" / "yolox_nano.onnx"
EDGETPU_MODEL = MODELS / "tflite" / "ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite"


def _forget_stand_ins() -> None:
    from edge_inference.backends import hailo_backend

    for name in [m for m in sys.modules if m.split(".")[0] in ("hailo_platform", "rknnlite")]:
        del sys.modules[name]
    hailo_backend.SharedVDevice._open.clear()  # a VDevice of a forgotten stand-in is no device


@pytest.fixture
def vendor(monkeypatch, tmp_path):
    """The stand-ins importable as the vendors' modules, on a fake device tree; forgotten afterwards, so later tests
    see this machine's own runtimes (or none)."""
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("EDGE_SYSROOT", str(tmp_path / "root"))
    _forget_stand_ins()
    yield tmp_path
    _forget_stand_ins()


# --- Hailo ---------------------------------------------------------------------------------------------------------

PERSON = [0.25, 0.1, 0.75, 0.3, 0.9]  # y_min, x_min, y_max, x_max, score
NMS_OUTPUT = {"name": "yolov8n/yolov8_nms_postprocess", "order": "HAILO_NMS_BY_CLASS", "classes": 80}


def hailo_model(vendor: Path, outputs: list[dict], detections: dict[int, list[list[float]]]) -> Path:
    import hailo_platform

    fake_devices.hailo(vendor / "root")
    return hailo_platform.write_hef(vendor / "yolov8n.hef", outputs, detections)


@pytest.mark.parametrize("version", ["4.13.0", "4.20.0"])
def test_hailo_runs_under_the_scheduler_without_activate_on_both_pyhailort_behaviours(vendor, version, caplog):
    model = hailo_model(vendor, [NMS_OUTPUT], {0: [PERSON], 2: [[0.5, 0.5, 0.6, 0.7, 0.8]]})
    import hailo_platform

    hailo_platform.__version__ = version
    hailo_platform.CALLS.clear()
    caplog.set_level(logging.WARNING, logger="pyhailort")
    detector = load_detector(DetectorConfig(str(model), backend="hailo"), Settings(model_cache=vendor / "cache"))
    assert detector.backend.engine == f"hailort {version}" and detector.spec.decoder == "hailo-nms"
    image = np.zeros((480, 640, 3), np.uint8)  # letterboxed into 640x640: 80 px of padding above and below
    found = {d.label: d for d in detector.detect(image).detections}
    assert set(found) == {"person", "car"}
    box = found["person"].box
    assert (box.x1, box.y1, box.x2, box.y2) == pytest.approx((64, 80, 192, 400), abs=0.5)
    detector.close()
    assert hailo_platform.CALLS == ["VDevice(ROUND_ROBIN)", "release"]  # no activate(): no warning, no refusal
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()]


def test_the_stand_in_refuses_activate_under_the_scheduler_as_pyhailort_4_13_does(vendor):
    """The pattern the engine used before: it fails the load on 4.13 and warns on every load on 4.14+."""
    model = hailo_model(vendor, [NMS_OUTPUT], {})
    import hailo_platform as hp

    hp.__version__ = "4.13.0"
    group = hp.VDevice().configure(hp.HEF(str(model)))[0]
    with pytest.raises(hp.HailoRTException, match="not allowed when the core-op scheduler is active"):
        group.activate(group.create_params())


def test_hailo_without_the_scheduler_activates_for_this_process(vendor):
    model = hailo_model(vendor, [NMS_OUTPUT], {0: [PERSON]})
    import hailo_platform

    hailo_platform.__version__ = "4.13.0"
    hailo_platform.CALLS.clear()
    options = BackendOptions(engine_options={"scheduler": "none"})
    backend = get_engine("hailo").load(model, options)
    (rows,) = backend.run(np.zeros((1, 640, 640, 3), np.uint8))
    np.testing.assert_allclose(rows, [[[*PERSON, 0]]])  # rows straight from pyhailort's per-class arrays
    backend.close()
    assert hailo_platform.CALLS == ["VDevice(NONE)", "activate", "release"]
    assert backend.device == "hailo:0 (not scheduled)"


@pytest.mark.parametrize("version", ["4.13.0", "4.20.0"])
def test_two_models_share_the_one_vdevice_hailort_gives_the_chip_to(vendor, version):
    """HailoRT gives the chip to the first VDevice that opens it: a second .hef opening its own failed with
    HAILO_OUT_OF_PHYSICAL_DEVICES. Both run on one VDevice, released with the last; float outputs are asked for
    with `quantized=False`, which 4.13 needs and 4.20 ignores."""
    import hailo_platform as hp

    hp.__version__ = version
    first = hailo_model(vendor, [NMS_OUTPUT], {0: [PERSON]})
    second = hp.write_hef(vendor / "other.hef", [NMS_OUTPUT], {2: [PERSON]})
    hp.CALLS.clear()
    one, two = (get_engine("hailo").load(model, BackendOptions()) for model in (first, second))
    frame = np.zeros((1, 640, 640, 3), np.uint8)
    assert one.run(frame)[0][0, 0, 5] == 0 and two.run(frame)[0][0, 0, 5] == 2
    one.close()
    assert two.run(frame)[0].shape == (1, 1, 6)
    two.close()
    assert hp.CALLS == ["VDevice(ROUND_ROBIN)", "release"]


def test_the_hailo_stand_in_refuses_what_pyhailort_refuses(vendor):
    """The stand-in's own refusals, as HailoRT's source has them: a second VDevice, float outputs left quantized on
    4.13, a float32 tensor on a uint8 input; the multi-process service lets a second program in."""
    import hailo_platform as hp

    hp.__version__ = "4.13.0"
    model = hailo_model(vendor, [NMS_OUTPUT], {})
    device = hp.VDevice()
    with pytest.raises(hp.HailoRTException, match="HAILO_OUT_OF_PHYSICAL_DEVICES"):
        hp.VDevice()
    group = device.configure(hp.HEF(str(model)))[0]
    inputs = hp.InputVStreamParams.make(group, format_type=hp.FormatType.UINT8)
    with pytest.raises(hp.HailoRTException, match="must be marked as not quantized"):
        hp.InferVStreams(group, inputs, hp.OutputVStreamParams.make(group, format_type=hp.FormatType.FLOAT32))
    runner = hp.InferVStreams(
        group, inputs, hp.OutputVStreamParams.make(group, quantized=False, format_type=hp.FormatType.FLOAT32)
    )
    with pytest.raises(hp.HailoRTException, match="item size is 4, not 1"):
        runner.infer({"yolov8n/input_layer1": np.zeros((1, 640, 640, 3), np.float32)})
    params = hp.VDevice.create_params()
    params.multi_process_service = True
    hp.VDevice(params)  # through hailort_service: the chip is the service's, shared
    device.release()


def test_hailo_through_the_multi_process_service_and_hailort_5(vendor, monkeypatch):
    import hailo_platform as hp

    from edge_inference.backends import hailo_backend

    model = hailo_model(vendor, [NMS_OUTPUT], {0: [PERSON]})
    elsewhere = hp.VDevice()  # another program holds the chip
    options = BackendOptions(engine_options={"multi_process_service": True})
    backend = get_engine("hailo").load(model, options)
    assert backend.device == "hailo:0 via hailort_service" and backend.run(np.zeros((1, 640, 640, 3), np.uint8))
    backend.close()
    elsewhere.release()
    monkeypatch.setattr(hailo_backend, "runtime_version", lambda: "5.1.1")
    with pytest.raises(BackendError, match=r"HailoRT 5.1.1 is HailoRT 5 \(Hailo-10H, a different API\)"):
        get_engine("hailo").load(model, BackendOptions())
    assert "Hailo-10H" in (get_engine("hailo").probe().problem or "")


def test_hailo_keeps_classes_beyond_the_labels_and_refuses_segmentation_outputs(vendor):
    model = hailo_model(vendor, [{**NMS_OUTPUT, "classes": 90}], {85: [PERSON]})
    detector = load_detector(DetectorConfig(str(model), backend="hailo"), Settings(model_cache=vendor / "cache"))
    (found,) = detector.detect(np.zeros((640, 640, 3), np.uint8)).detections
    assert (found.class_id, found.label) == (85, "class_85")  # a 90-class .hef with COCO-80 labels: nothing dropped
    detector.close()
    masks = hailo_model(vendor, [{**NMS_OUTPUT, "order": "HAILO_NMS_WITH_BYTE_MASK"}], {})
    with pytest.raises(BackendError, match=r"HAILO_NMS_WITH_BYTE_MASK \(instance segmentation.*detection build"):
        get_engine("hailo").load(masks, BackendOptions())


# --- Rockchip ------------------------------------------------------------------------------------------------------


def dfl_logits(distances: np.ndarray, bins: int = 16) -> np.ndarray:
    """DFL logits whose softmax expectation is exactly `distances` (4, n): two neighbouring bins share the weight."""
    distances = np.clip(distances, 0, bins - 1 - 1e-4)
    low = np.floor(distances).astype(int)
    weight_high = distances - low
    probabilities = np.full((4, bins, distances.shape[1]), 1e-9, np.float64)
    side, cell = np.indices(distances.shape)
    probabilities[side, low, cell] += 1 - weight_high
    probabilities[side, low + 1, cell] += weight_high
    return np.log(probabilities).reshape(4 * bins, -1).astype(np.float32)


def zoo_outputs(boxes_xyxy: np.ndarray, scores: np.ndarray, size: int = 640, sums: bool = True) -> list[np.ndarray]:
    """rknn_model_zoo's split head for a (4, N) box set and (C, N) class scores over the usual anchor points."""
    outputs, start = [], 0
    for stride in (8, 16, 32):
        grid = size // stride
        count = grid * grid
        ys, xs = np.divmod(np.arange(count), grid)
        centre = np.stack([xs + 0.5, ys + 0.5])
        box = boxes_xyxy[:, start : start + count] / stride
        distances = np.concatenate([centre - box[:2], box[2:] - centre])
        classes = scores[:, start : start + count]
        outputs += [dfl_logits(distances).reshape(1, -1, grid, grid), classes.reshape(1, -1, grid, grid)]
        if sums:
            outputs.append(np.clip(classes.sum(axis=0), 0, 1).reshape(1, 1, grid, grid))
        start += count
    return outputs


def test_zoo_split_head_decodes_a_box_built_by_hand(vendor):
    """One car at cell (12, 7) of stride 16, 2, 3, 4 and 1.5 cells from its edges, through RKNNLite's stand-in."""
    boxes, scores = np.zeros((4, 8400), np.float32), np.zeros((80, 8400), np.float32)
    column = 6400 + 7 * 40 + 12
    boxes[:, column] = [(12.5 - 2) * 16, (7.5 - 3) * 16, (12.5 + 4) * 16, (7.5 + 1.5) * 16]
    scores[2, column] = 0.9
    import rknnlite.api as rknn

    fake_devices.rk3588(vendor / "root")
    model = rknn.write_rknn(vendor / "yolov8n.rknn", (1, 640, 640, 3), zoo_outputs(boxes, scores))
    detector = load_detector(DetectorConfig(str(model), backend="rknn"), Settings(model_cache=vendor / "cache"))
    assert detector.spec.decoder == "yolov8-rknn"  # recognised from the nine output shapes
    (car,) = detector.detect(np.zeros((640, 640, 3), np.uint8)).detections
    assert car.label == "car" and car.score == pytest.approx(0.9)
    assert (car.box.x1, car.box.y1, car.box.x2, car.box.y2) == pytest.approx((168, 72, 264, 144), abs=0.01)
    detector.close()
    assert rknn.CALLS[-1] == "release"


def test_single_core_rockchip_socs_get_the_auto_core_mask(vendor):
    import rknnlite.api as rknn

    (vendor / "root").mkdir()
    fake_devices.write(vendor / "root", "/proc/device-tree/compatible", "radxa,zero3\x00rockchip,rk3566\x00")
    fake_devices.write(vendor / "root", "/sys/kernel/debug/rknpu/version", "RKNPU driver: v0.9.2\n")
    rknn.SOC = "rk3566"
    try:
        model = rknn.write_rknn(vendor / "m.rknn", (1, 640, 640, 3), [np.zeros((1, 10), np.float32)])
        rknn.CALLS.clear()
        backend = get_engine("rknn").load(model, BackendOptions("0"))
        assert rknn.CALLS[0] == f"init_runtime(core_mask={rknn.RKNNLite.NPU_CORE_AUTO})"
        backend.close()
    finally:
        rknn.SOC = "rk3588"


def test_an_rk3588_model_gets_a_context_on_each_npu_core_for_its_lanes(vendor, tmp_path):
    """One RKNNLite context runs one inference at a time: three streams on one model kept two of the three cores
    idle. With `auto` and three lanes the engine opens a context per core, pinned to it, and the pool's lanes are
    those: three streams' frames run on cores 0, 1 and 2 side by side."""
    import rknnlite.api as rknn

    fake_devices.rk3588(vendor / "root")
    model = rknn.write_rknn(vendor / "m.rknn", (1, 640, 640, 3), [np.zeros((1, 10), np.float32)])
    rknn.CALLS.clear()
    backend = get_engine("rknn").load(model, BackendOptions(lanes=3))
    masks = [rknn.RKNNLite.NPU_CORE_0, rknn.RKNNLite.NPU_CORE_1, rknn.RKNNLite.NPU_CORE_2]
    assert [c for c in rknn.CALLS if c.startswith("init_runtime")] == [f"init_runtime(core_mask={m})" for m in masks]
    assert (backend.lanes, backend.parallel, backend.device) == (3, "shared", "rk3588 npu 0, 1, 2")
    backend.close()
    single = get_engine("rknn").load(model, BackendOptions())  # one stream: one context, the runtime's own choice
    assert (single.lanes, single.device) == (1, "rk3588 npu auto")
    single.close()
    pool = DetectorPool(opener=open_backend)  # in this process, where the stand-in's record can be read
    handles = [pool.acquire(f"cam{i}", "rknn", model, BackendOptions(), lanes=3) for i in range(3)]
    assert describe_engine(pool.engines()[0]).lanes == 3
    rknn.CALLS.clear()
    with ThreadPoolExecutor(3) as workers:
        list(workers.map(lambda h: [h.run(np.zeros((1, 640, 640, 3), np.uint8)) for _ in range(20)], handles))
    used = {c for c in rknn.CALLS if c.startswith("inference")}
    assert used == {f"inference(core_mask={m})" for m in masks}
    for handle in handles:
        handle.close()


@pytest.mark.parametrize("photo", ["astronaut", "chelsea", "coffee"])
def test_the_rknn_engine_reads_a_real_split_yolov8_heads_outputs(vendor, photo):
    """A stock YOLOv8n export split into rknn_model_zoo's nine outputs (what `edge models convert --to rknn` builds),
    its real outputs on a photo handed back by RKNNLite's stand-in: the RKNN engine, with the sidecar the conversion
    writes, finds what the export itself finds on ONNX Runtime. The simulator's own outputs of the converted file are
    judged in test_convert.py."""
    import onnx
    import onnxruntime as ort
    import rknnlite.api as rknn
    import yaml

    from edge_inference.edge.tools.conversion.split_head import split_yolov8_head
    from tests.float_yolov8n import float_yolov8n

    exported = float_yolov8n(YOLOV8N, vendor / "yolov8n.onnx")
    split = vendor / "yolov8n-split.onnx"
    onnx.save(split_yolov8_head(onnx.load(str(exported))), str(split))
    reference = load_detector(DetectorConfig(str(exported), backend="onnx", threads=1))
    image = skimage_photo(photo)
    tensor = reference.prepare(image).tensor
    outputs = ort.InferenceSession(str(split), providers=["CPUExecutionProvider"]).run(None, {"images": tensor})
    fake_devices.rk3588(vendor / "root")
    model = rknn.write_rknn(vendor / "yolov8n.rknn", (1, 640, 640, 3), outputs)
    sidecar = {"decoder": "yolov8-rknn", "width": 640, "height": 640, "pad_value": 114}
    model.with_name(model.name + ".yaml").write_text(yaml.safe_dump(sidecar))
    detector = load_detector(DetectorConfig(str(model), backend="rknn"), Settings(model_cache=vendor / "cache"))
    expected, got = reference.detect(image).detections, detector.detect(image).detections
    assert expected and [d.label for d in got] == [d.label for d in expected]
    for a, b in zip(got, expected, strict=True):
        assert a.box.iou(b.box) >= 0.99 and a.score == pytest.approx(b.score, abs=1e-4)
    reference.close()
    detector.close()


# --- TensorRT / CUDA / OpenVINO EP ---------------------------------------------------------------------------------


def test_tensorrt_gets_cuda_behind_it_fp16_and_its_caches_under_the_model_cache(monkeypatch, tmp_path):
    sessions = onnxruntime_gpu.install(monkeypatch)
    detector = load_detector(DetectorConfig(str(YOLOX), "onnx", "tensorrt"), Settings(model_cache=tmp_path))
    cache = str(tmp_path / "tensorrt")
    (session,) = sessions
    assert session["providers"] == ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    trt = session["options"]["TensorrtExecutionProvider"]
    engines = Path(trt.pop("trt_engine_cache_path"))
    assert trt == {
        "device_id": "0",
        "trt_fp16_enable": "True",
        "trt_engine_cache_enable": "True",
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": cache,
    }
    assert engines.parent == Path(cache) and engines.name.startswith("engines-")  # a folder per model content
    assert session["options"]["CUDAExecutionProvider"] == {"device_id": "0"}
    assert Path(cache).is_dir() and detector.backend.device == "TensorrtExecutionProvider:0"
    assert detector.detect(skimage_photo("astronaut")).detections  # runs (on the CPU provider here)


def test_tensorrt_options_from_a_stream_config_and_the_openvino_ep_device_type(monkeypatch, tmp_path):
    sessions = onnxruntime_gpu.install(monkeypatch)
    config = DetectorConfig(
        str(YOLOX), "onnx", "tensorrt:1", engine_options={"onnx": {"trt_fp16": False, "trt_engine_cache": False}}
    )
    load_detector(config, Settings(model_cache=tmp_path)).close()
    trt = sessions[-1]["options"]["TensorrtExecutionProvider"]
    assert trt["trt_fp16_enable"] == "False" and "trt_engine_cache_enable" not in trt and trt["device_id"] == "1"
    assert trt["trt_timing_cache_enable"] == "True"
    heuristic = DetectorConfig(str(YOLOX), "onnx", "cuda", engine_options={"onnx": {"cuda_conv_search": "heuristic"}})
    load_detector(heuristic, Settings(model_cache=tmp_path)).close()
    assert sessions[-1]["options"]["CUDAExecutionProvider"] == {"device_id": "0", "cudnn_conv_algo_search": "HEURISTIC"}
    monkeypatch.setattr(onnxruntime_gpu, "GPU_PROVIDERS", ["OpenVINOExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(
        "onnxruntime.get_available_providers", lambda: ["OpenVINOExecutionProvider", "CPUExecutionProvider"]
    )
    open_backend("onnx", YOLOX, BackendOptions("openvino:GPU")).close()
    assert sessions[-1]["options"]["OpenVINOExecutionProvider"] == {"device_type": "GPU"}


def test_a_gpu_build_without_its_cuda_libraries_names_them_and_how_to_install_them(monkeypatch, capfd):
    """onnxruntime-gpu installed alone (as `pip install onnxruntime-gpu` leaves it): ONNX Runtime itself lists the
    CUDA and TensorRT providers, then runs every session on the CPU."""
    onnxruntime_gpu.install_gpu_build(monkeypatch, missing=onnxruntime_gpu.CUDA_13_LIBRARIES)
    for device in ("cuda", "tensorrt:0"):
        with pytest.raises(BackendError) as info:
            open_backend("onnx", YOLOX, BackendOptions(device))
        message = str(info.value)
        assert "GPU build for CUDA 13" in message and "libcublasLt.so.13, libcublas.so.13, libcurand.so.10" in message
        assert "pip install 'onnxruntime-gpu[cuda,cudnn]'" in message
        assert message.endswith("or pass --fallback to run on the CPU instead.")
    backend = open_backend("onnx", YOLOX, BackendOptions("cuda", allow_fallback=True))
    assert backend.device == "CPUExecutionProvider" and "CUDAExecutionProvider unavailable" in backend.notes[0]
    status = get_engine("onnx").probe()
    assert status.devices == ["cpu"] and "libcurand.so.10 not found" in (status.problem or "")
    assert capfd.readouterr().out == ""  # what preload_dlls prints never reaches stdout (`edge detect --json`)
    onnxruntime_gpu.install_gpu_build(monkeypatch, driver=False)  # the wheel and CUDA's, on a machine with no GPU
    with pytest.raises(BackendError, match=r"no NVIDIA driver \(libcuda.so.1 not found\).*or pass --fallback"):
        open_backend("onnx", YOLOX, BackendOptions("cuda"))
    assert "no NVIDIA driver" in (get_engine("onnx").probe().problem or "")


def test_a_provider_that_cannot_start_is_named_with_what_it_lacks(monkeypatch, capfd):
    """TensorRT without its libraries: ONNX Runtime 1.31.1 raises (seen on an H100), and the model still loads
    without it, so that is what is said, and --fallback runs on CUDA. CUDA's libraries where a GPU build without
    preload_dlls (before 1.21) cannot find them: ONNX Runtime logs two lines and runs on the CPU;
    their reason is in the message, not beside it."""
    onnxruntime_gpu.install_gpu_build(monkeypatch, failing={"TensorrtExecutionProvider": "libnvinfer.so.10"})
    with pytest.raises(BackendError) as info:
        open_backend("onnx", YOLOX, BackendOptions("tensorrt"))
    assert str(info.value) == (
        "ONNX Runtime could not start TensorrtExecutionProvider (Please install TensorRT libraries as mentioned in the "
        "GPU requirements page, make sure they're in the PATH or LD_LIBRARY_PATH, and that your GPU is supported.) "
        "and would run on CUDAExecutionProvider. Check the CUDA/cuDNN/TensorRT installation, or pass --fallback."
    )
    backend = open_backend("onnx", YOLOX, BackendOptions("tensorrt", allow_fallback=True))
    assert backend.device == "CUDAExecutionProvider" and "running there (fallback requested)" in backend.notes[0]
    failing = {"CUDAExecutionProvider": "libcublasLt.so.12"}
    onnxruntime_gpu.install_gpu_build(monkeypatch, failing=failing, version=("1.20.1", "12.4"))
    with pytest.raises(BackendError, match=r"start CUDAExecutionProvider \(libcublasLt.so.12: cannot open shared "):
        open_backend("onnx", YOLOX, BackendOptions("cuda"))
    assert capfd.readouterr().err == ""  # ONNX Runtime's own log lines are in the message, not beside it


def test_an_onnx_runtime_that_falls_back_by_itself_says_what_failed_and_prints_nothing(monkeypatch, capfd):
    """Before 1.23 ONNX Runtime ignores `enable_fallback=0` (JetPack's wheels are older): a TensorRT that cannot
    start prints a banner on stdout and the session runs on CUDA. The banner must not reach stdout (`edge detect
    --json`'s answer), and the line names TensorRT's own reason, not missing libraries."""
    onnxruntime_gpu.install_gpu_build(
        monkeypatch, failing={"TensorrtExecutionProvider": "libnvinfer.so.8"}, version=("1.19.2", "12.2")
    )
    with pytest.raises(BackendError) as info:
        open_backend("onnx", YOLOX, BackendOptions("tensorrt"))
    assert "could not start TensorrtExecutionProvider (Please install TensorRT libraries" in str(info.value)
    assert "would run on CUDAExecutionProvider" in str(info.value)
    backend = open_backend("onnx", YOLOX, BackendOptions("tensorrt", allow_fallback=True))
    assert backend.device == "CUDAExecutionProvider" and "Please install TensorRT" in backend.notes[0]
    assert capfd.readouterr().out == ""


def test_what_other_threads_print_while_an_engine_builds_still_reaches_stdout(monkeypatch, capfd):
    """ONNX Runtime's banner is taken off stdout while a session is made, and a TensorRT session is made for minutes
    (its engine is built then): what the service's other threads print meanwhile goes out, not into that capture."""
    import threading

    import onnxruntime as ort

    onnxruntime_gpu.install(monkeypatch)
    recording = ort.InferenceSession

    def building(*args, **kwargs):
        other = threading.Thread(target=print, args=("a camera's line, printed while TensorRT builds",))
        other.start()
        other.join()
        print("*************** EP Error *************** (the banner, on the loading thread)")
        return recording(*args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", building)
    open_backend("onnx", YOLOX, BackendOptions("tensorrt")).close()
    out = capfd.readouterr().out
    assert out == "a camera's line, printed while TensorRT builds\n"


def test_device_auto_runs_on_cuda_where_it_starts_and_on_the_cpu_saying_why_where_not(monkeypatch):
    """`--backend onnx` without a device: a GPU machine's ONNX Runtime runs on CUDA, as Ultralytics picks the GPU;
    where CUDA cannot start, the CPU, with the reason in a note, never an error (nobody asked for CUDA)."""
    sessions = onnxruntime_gpu.install(monkeypatch)  # every provider starts
    backend = open_backend("onnx", YOLOX, BackendOptions())
    assert sessions[-1]["providers"] == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert backend.device == "CUDAExecutionProvider:0" and not backend.notes
    onnxruntime_gpu.install_gpu_build(monkeypatch, missing=onnxruntime_gpu.CUDA_13_LIBRARIES)
    backend = open_backend("onnx", YOLOX, BackendOptions())
    assert backend.device == "CPUExecutionProvider" and "--device auto: on the CPU, as" in backend.notes[0]
    assert "libcublasLt.so.13" in backend.notes[0] and "onnxruntime-gpu[cuda,cudnn]" in backend.notes[0]
    failing = {"CUDAExecutionProvider": "libcublasLt.so.12"}
    onnxruntime_gpu.install_gpu_build(monkeypatch, failing=failing, version=("1.20.1", "12.4"))
    backend = open_backend("onnx", YOLOX, BackendOptions())
    assert backend.device == "CPUExecutionProvider" and len(backend.notes) == 1
    assert backend.notes[0].startswith("--device auto: ONNX Runtime could not start CUDAExecutionProvider")
    assert "libcublasLt.so.12" in backend.notes[0] and backend.notes[0].endswith("running there")


@pytest.mark.parametrize("photo", ["astronaut", "chelsea", "coffee"])
def test_cuda_finds_what_the_cpu_finds_where_a_gpu_runs_it_and_says_what_to_install_where_not(photo):
    config = DetectorConfig(str(YOLOX), "onnx", "cuda")
    if not provider_starts_here("CUDAExecutionProvider", YOLOX):
        with pytest.raises(BackendError, match=r"CUDAExecutionProvider.*(onnxruntime-gpu|--fallback)"):
            load_detector(config)
        return
    gpu, cpu = load_detector(config), load_detector(replace(config, device="cpu"))
    assert gpu.backend.session.get_providers()[0] == "CUDAExecutionProvider"
    assert gpu.backend.device == "CUDAExecutionProvider:0" and not gpu.backend.notes
    image = skimage_photo(photo)
    expected, got = cpu.detect(image).detections, gpu.detect(image).detections
    assert expected and [d.label for d in got] == [d.label for d in expected]
    for a, b in zip(got, expected, strict=True):  # TF32 convolutions on the GPU: the same boxes, near the same scores
        assert a.box.iou(b.box) >= 0.98 and a.score == pytest.approx(b.score, abs=0.02)
    gpu.close()
    cpu.close()


# --- Coral ---------------------------------------------------------------------------------------------------------


@pytest.mark.process
def test_edgetpu_uses_one_runtime_and_the_library_edge_libedgetpu_names_even_with_pycoral(monkeypatch, tmp_path):
    """pycoral's loader hard-codes libedgetpu.so.1 and brings tflite_runtime: with a pycoral importable, the engine
    still opens the library EDGE_LIBEDGETPU names, through LiteRT alone."""
    fake = tmp_path / "pycoral" / "utils"
    fake.mkdir(parents=True)
    (tmp_path / "pycoral" / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "edgetpu.py").write_text("def load_edgetpu_delegate(options=None):\n    raise AssertionError('used')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    libm = ctypes.util.find_library("m")
    monkeypatch.setenv("EDGE_LIBEDGETPU", libm)
    with pytest.raises(BackendError, match=f"{libm} is not a TFLite delegate library"):
        open_backend("edgetpu", EDGETPU_MODEL, BackendOptions("usb"))
    assert "tflite_runtime" not in sys.modules and "pycoral.utils.edgetpu" not in sys.modules


DELEGATE_STUB = r"""
#include <stdio.h>
#include <stdlib.h>
/* Writes the options libedgetpu's delegate would receive, then declines (returns no delegate). */
void* tflite_plugin_create_delegate(char** keys, char** values, size_t n, void (*report)(const char*)) {
    FILE* f = fopen(getenv("STUB_RECORD"), "w");
    for (size_t i = 0; i < n; i++) fprintf(f, "%s=%s\n", keys[i], values[i]);
    fclose(f);
    return NULL;
}
void tflite_plugin_destroy_delegate(void* delegate) {}
"""


@pytest.mark.process
@pytest.mark.skipif(
    not ctypes.util.find_library("c")
    or subprocess.run(["cc", "--version"], capture_output=True, check=False).returncode != 0,
    reason="no C compiler to build a stand-in delegate library",
)
def test_edgetpu_hands_the_device_to_the_library_edge_libedgetpu_names(monkeypatch, tmp_path):
    source, library, record = tmp_path / "stub.c", tmp_path / "libstub.so", tmp_path / "options.txt"
    source.write_text(DELEGATE_STUB)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    monkeypatch.setenv("EDGE_LIBEDGETPU", str(library))
    monkeypatch.setenv("STUB_RECORD", str(record))
    monkeypatch.setenv("EDGE_SYSROOT", str(tmp_path))  # no accelerator on the bus: the message says so
    with pytest.raises(BackendError, match="no Edge TPU found"):
        open_backend("edgetpu", EDGETPU_MODEL, BackendOptions(":1"))
    assert record.read_text() == "device=:1\n"  # ":N": the N-th Edge TPU of any kind, as libedgetpu reads it


# --- engine options ------------------------------------------------------------------------------------------------


def test_a_wrong_engine_option_is_one_line_naming_the_engine_and_its_keys(tmp_path):
    with pytest.raises(BackendError) as unknown:
        load_detector(DetectorConfig(str(YOLOX), "onnx", engine_options={"onnx": {"fp17": True}}))
    assert str(unknown.value) == (
        "unknown option 'fp17' for onnx; allowed: trt_fp16, trt_engine_cache, trt_timing_cache, trt_cache_dir, "
        "cuda_conv_search, spinning"
    )
    with pytest.raises(BackendError, match=r"^engine option openvino.performance_hint: .*'FAST'.*allowed: perf"):
        load_detector(DetectorConfig(str(YOLOX), "openvino", engine_options={"openvino": {"performance_hint": "FAST"}}))
    with pytest.raises(BackendError, match=r"^unknown option 'x' for tflite; it has no options$"):
        load_detector(DetectorConfig(str(YOLOX), "onnx", engine_options={"tflite": {"x": 1}}))
    config = tmp_path / "streams.yaml"
    config.write_text("streams:\n  - id: gate\n    source: x.mp4\n    engine_options:\n      hailo: {scheduler: yes}\n")
    with pytest.raises(ConfigError) as bad:
        load_config(config)
    assert "engine option hailo.scheduler" in str(bad.value) and "allowed: scheduler" in str(bad.value)
    assert "\n" not in str(bad.value)


def test_the_config_holds_typed_engine_options_and_the_engine_receives_them(tmp_path):
    """Engine options were checked in the config, twice more in the loader, then parsed again inside each engine's
    `load` (the typed result thrown away each time): the config now holds each engine's own options model, parsed
    once, and `load` receives that very object."""
    from edge_inference.backends.onnxruntime_backend import OnnxRuntimeOptions

    config = tmp_path / "cams.yaml"
    config.write_text(
        f"streams:\n  - id: gate\n    source: {VTEST}\n    model: {YOLOX}\n    backend: onnx\n"
        "    engine_options:\n      onnx: {spinning: runs}\n      openvino: {performance_hint: THROUGHPUT}\n"
    )
    stream = load_config(config).streams[0]
    typed = stream.engine_options["onnx"]
    assert isinstance(typed, OnnxRuntimeOptions) and typed.spinning == "runs"
    assert stream.model_dump()["engine_options"]["openvino"]["performance_hint"] == "THROUGHPUT"
    received = []

    def opener(key: str, path: Path, options: BackendOptions) -> Backend:
        received.append(options.engine_options)
        return open_backend(key, path, options)

    engine = DetectorConfig(str(YOLOX), "onnx", "cpu", threads=1, engine_options=stream.engine_options)
    load_detector(engine, opener=opener).close()
    assert received == [typed] and received[0] is typed


@pytest.mark.process
def test_the_command_line_takes_engine_options_and_lists_them(tmp_path):
    photo = tmp_path / "astronaut.png"
    cv2.imwrite(str(photo), skimage_photo("astronaut"))
    wrong = run_edge("detect", str(photo), "-m", str(YOLOX), "-b", "onnx", "--engine-option", "onnx.trt_fp16=maybe")
    assert wrong.returncode != 0
    (line,) = [x for x in wrong.stderr.splitlines() if x.strip()]
    assert line.startswith("error: engine option onnx.trt_fp16") and "allowed: trt_fp16" in line
    options = {r["key"]: r["options"] for r in json.loads(run_edge("backends", "--json").stdout)}
    assert {o["name"]: o["default"] for o in options["onnx"]}["trt_fp16"] is True
    assert {o["name"]: o["default"] for o in options["hailo"]} == {
        "scheduler": "round_robin",
        "multi_process_service": False,
    }
    assert options["tflite"] == []


def test_tensorrt_engines_are_kept_per_model_content(monkeypatch, tmp_path):
    """ONNX Runtime names a cached TensorRT engine by the model's file name, tensor names and versions, not by its
    weights (`TRTGenerateId`): a retrained `best.onnx` in the same place silently ran the old engine. The engine
    cache is a folder per model content; the timing cache (layer timings, no weights) stays shared."""
    sessions = onnxruntime_gpu.install(monkeypatch)
    best = tmp_path / "models" / "best.onnx"
    best.parent.mkdir()
    folders = []
    for weights in (YOLOX, MODELS / "onnx/nanodet_m.onnx", YOLOX):  # retrained, then the first weights back
        shutil.copy(weights, best)
        open_backend("onnx", best, BackendOptions("tensorrt", cache_dir=tmp_path / "cache")).close()
        trt = sessions[-1]["options"]["TensorrtExecutionProvider"]
        folders.append((trt["trt_engine_cache_path"], trt["trt_timing_cache_path"]))
    engines = [engine for engine, _ in folders]
    assert engines[0] != engines[1] and engines[0] == engines[2]
    assert len({timing for _, timing in folders}) == 1 and all(Path(e).parent == Path(folders[0][1]) for e in engines)


def test_tensorrt_engines_are_kept_per_weights_held_beside_the_graph(monkeypatch, tmp_path):
    """A model saved with external data (`best.onnx` + `best.onnx.data`, as exports over 2 GB must be): retrained
    weights leave the graph file byte for byte the same, and must still get an engine of their own."""
    onnx = pytest.importorskip("onnx")
    sessions = onnxruntime_gpu.install(monkeypatch)
    best = tmp_path / "models" / "best.onnx"
    best.parent.mkdir()
    onnx.save_model(onnx.load(YOLOX), best, save_as_external_data=True, location="best.onnx.data")
    graph = best.read_bytes()
    folders = []
    for scale in (1.0, 0.5):  # the same graph, its weights retrained (here: scaled)
        data = np.fromfile(best.with_name("best.onnx.data"), np.uint8)
        weights = data[: data.size // 4 * 4].view(np.float32) * np.float32(scale)
        weights.view(np.uint8).tofile(best.with_name("best.onnx.data"))
        assert best.read_bytes() == graph
        open_backend("onnx", best, BackendOptions("tensorrt", cache_dir=tmp_path / "cache")).close()
        folders.append(sessions[-1]["options"]["TensorrtExecutionProvider"]["trt_engine_cache_path"])
    assert folders[0] != folders[1]


@pytest.mark.process
def test_openvino_keeps_what_it_compiles_for_a_gpu_or_npu(tmp_path):
    """OpenVINO on a GPU or an NPU compiled the model at every start (seconds to a minute): its model cache is set
    under the model cache for them, AUTO included where such a device is there. The CPU keeps nothing on disk."""
    from edge_inference.backends.openvino_backend import cache_config

    cache = tmp_path / "cache"
    assert cache_config("GPU", ["CPU", "GPU"], cache) == {"CACHE_DIR": str(cache / "openvino")}
    assert cache_config("NPU", ["CPU", "NPU"], cache) == {"CACHE_DIR": str(cache / "openvino")}
    assert cache_config("AUTO", ["CPU", "GPU.0"], cache) == {"CACHE_DIR": str(cache / "openvino")}
    assert cache_config("AUTO", ["CPU"], cache) == cache_config("CPU", ["CPU"], cache) == {}
    assert cache_config("GPU", ["GPU"], None) == {}
    open_backend("openvino", MODELS / "openvino/yolox_nano.xml", BackendOptions("CPU", cache_dir=cache)).close()
    assert not (cache / "openvino").exists()  # here: the CPU alone


# --- Coral: the runtime pair, and frames through EdgeTPUBackend.run on a stand-in ------------------------------------

LIBEDGETPU_STAND_IN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* Answers as libedgetpu 16.0 does: a delegate where its device is plugged in (the file STUB_TPU names exists), NULL
   where not; and a transfer to a device that is gone ends the process, as usb_driver.cc's LOG(FATAL) does. */
static int plugged(void) {
    const char* tpu = getenv("STUB_TPU");
    return tpu && access(tpu, F_OK) == 0;
}
void* tflite_plugin_create_delegate(char** keys, char** values, size_t n, void (*report)(const char*)) {
    const char* record = getenv("STUB_TPU_OPENED");  /* the test's record of each delegate made */
    if (record) { FILE* f = fopen(record, "a"); if (f) { fputs("delegate\n", f); fclose(f); } }
    return plugged() ? malloc(16) : NULL;
}
void tflite_plugin_destroy_delegate(void* delegate) { free(delegate); }
void stand_in_bulk_out(unsigned bytes) {
    if (!plugged()) {
        fprintf(stderr, "F usb_driver.cc:708] [1-0] bulk out for %u bytes failed. Abort. "
                "UNAVAILABLE: LIBUSB_ERROR_NO_DEVICE\n", bytes);
        abort();
    }
}
const char* edgetpu_version(void) {
    return "BuildLabel(COMPILER=12.2.0,DATE=redacted,TIME=redacted), RuntimeVersion(14)";
}
"""
CORAL_FAKES = Path(__file__).parent / "fakes_coral"


def installed_libedgetpu(monkeypatch, admindir: Path, package: str, version: str) -> None:
    """A dpkg database holding `package` at `version`, which the real dpkg-query reads (DPKG_ADMINDIR)."""
    (admindir / "info").mkdir(parents=True, exist_ok=True)
    (admindir / "updates").mkdir(exist_ok=True)
    (admindir / "status").write_text(
        f"Package: {package}\nStatus: install ok installed\nPriority: optional\nSection: misc\n"
        f"Architecture: amd64\nSource: libedgetpu\nVersion: {version}\nDescription: Support library for Edge TPU\n"
    )
    monkeypatch.setenv("DPKG_ADMINDIR", str(admindir))


@pytest.fixture
def coral(monkeypatch, tmp_path):
    """tflite_runtime 2.17.1's stand-in on the path and a libedgetpu stand-in built here, its device present."""
    if subprocess.run(["cc", "--version"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no C compiler to build the libedgetpu stand-in")
    source, library = tmp_path / "edgetpu.c", tmp_path / "libedgetpu.so.1"
    source.write_text(LIBEDGETPU_STAND_IN)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    monkeypatch.syspath_prepend(str(CORAL_FAKES))
    monkeypatch.setenv("EDGE_LIBEDGETPU", str(library))
    plugged = tmp_path / "usb-plugged"
    plugged.touch()
    monkeypatch.setenv("STUB_TPU", str(plugged))
    monkeypatch.setenv("STUB_TPU_OPENED", str(tmp_path / "delegates-made"))
    installed_libedgetpu(monkeypatch, tmp_path / "dpkg", "libedgetpu1-std", "16.0tf2.17.1-1.bookworm")
    for name in [m for m in sys.modules if m.split(".")[0] == "tflite_runtime"]:
        monkeypatch.delitem(sys.modules, name)
    return library


@pytest.mark.process
def test_the_edge_tpu_engine_runs_frames_on_the_runtime_its_library_is_paired_with(coral, monkeypatch):
    """With tflite_runtime installed (the runtime libedgetpu builds are paired with) the engine loads the delegate
    into it, not into LiteRT, and EdgeTPUBackend.run takes frames to detections; a compiled YOLOv8n that left 26
    operations on the CPU (its head: TRANSPOSE x4, RESHAPE x4 ... beside one edgetpu-custom-op) says so; no device,
    and `--device cpu`, are each one line."""
    backend = open_backend("edgetpu", EDGETPU_MODEL, BackendOptions("usb"))
    assert backend.engine == "tflite_runtime 2.17.1 + libedgetpu.so.1" and not backend.notes
    twin = MODELS / "tflite" / "ssd_mobilenet_v2_coco_quant_postprocess.tflite"
    photo = skimage_photo("astronaut")
    on_tpu = load_detector(DetectorConfig(str(EDGETPU_MODEL), "edgetpu", "usb"))
    on_cpu = Detector(open_backend("tflite", twin, BackendOptions()), on_tpu.spec)
    assert on_tpu.detect(photo).detections == on_cpu.detect(photo).detections
    assert on_tpu.detect(photo).detections  # the astronaut
    yolo = open_backend("edgetpu", MODELS / "tflite" / "yolov8n_full_integer_quant_edgetpu.tflite", BackendOptions())
    assert yolo.notes[0].startswith("26 operations of yolov8n_full_integer_quant_edgetpu.tflite run on the CPU")
    assert "TRANSPOSE x4" in yolo.notes[0]
    with pytest.raises(BackendError, match="runs on an Edge TPU only; for the CPU use --backend tflite"):
        open_backend("edgetpu", EDGETPU_MODEL, BackendOptions("cpu"))
    (coral.parent / "usb-plugged").unlink()
    monkeypatch.setenv("EDGE_SYSROOT", str(coral.parent))  # no accelerator on the bus either
    with pytest.raises(BackendError, match="cannot use the Edge TPU: no Edge TPU found"):
        open_backend("edgetpu", EDGETPU_MODEL, BackendOptions("usb"))


@pytest.mark.process
def test_the_edge_tpu_engine_runs_in_a_process_of_its_own(coral):
    """An accelerator's engine is isolated by default (libedgetpu aborts on a failed USB transfer): the stand-in
    runtime is found there as here, and frames come back the same."""
    from edge_inference.backends.isolation import open_engine

    backend = open_engine("edgetpu", EDGETPU_MODEL, BackendOptions("usb"))
    try:
        assert type(backend).__name__ == "IsolatedBackend" and backend.engine.startswith("tflite_runtime 2.17.1")
        here = open_backend("edgetpu", EDGETPU_MODEL, BackendOptions("usb"))
        tensor = np.full(here.inputs[0].shape, 114, np.uint8)
        for ours, theirs in zip(backend.run(tensor), here.run(tensor), strict=True):
            assert np.array_equal(ours, theirs)
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("package", "runtime", "problem"),
    [
        ("libedgetpu1-std 16.0tf2.17.1-1.bookworm", "tflite-runtime 2.17.1", None),
        ("libedgetpu1-std 16.0", "tflite-runtime 2.5.0.post1", None),
        ("libedgetpu1-std 16.0", "tflite-runtime 2.14.0", "crashes with TFLite runtimes newer than 2.11"),
        ("libedgetpu1-max 16.0tf2.17.1-1.bookworm", "tflite-runtime 2.15.0", "built for TF 2.17 and the runtime"),
        ("libedgetpu1-std 16.0tf2.17.1-1.bookworm", "ai-edge-litert 1.2.0", "install the matching tflite_runtime"),
        (None, "tflite-runtime 2.17.1", None),
    ],
)
def test_doctor_knows_which_libedgetpu_and_runtime_pairs_work(package, runtime, problem):
    from edge_inference.backends.edgetpu_runtime import pair_problem

    said = pair_problem(package, runtime)
    assert said is None if problem is None else problem in (said or "")


@pytest.mark.process
def test_doctor_reads_the_installed_libedgetpu_and_runtime(coral, monkeypatch):
    from edge_inference.backends import edgetpu_runtime
    from edge_inference.edge.tools import doctor

    monkeypatch.setattr(doctor, "installed_package", lambda: "libedgetpu1-std 16.0")
    monkeypatch.setattr(doctor, "runtime_version", lambda: "tflite-runtime 2.17.1")
    finding = next(doctor.check_edgetpu_runtime())
    assert finding.status == "warn" and "google-coral/edgetpu#812" in finding.detail
    monkeypatch.setattr(doctor, "installed_package", lambda: "libedgetpu1-std 16.0tf2.17.1-1.bookworm")
    finding = next(doctor.check_edgetpu_runtime())
    assert finding.status == "ok" and "RuntimeVersion(14)" in finding.detail
    assert edgetpu_runtime.library_build(str(coral)).startswith("BuildLabel(")


@pytest.mark.process
def test_a_pair_known_to_crash_is_refused_at_load_with_doctors_line_and_not_retried_as_a_loop(coral, monkeypatch):
    """Coral's own libedgetpu 16.0 beside tflite_runtime 2.17.1 (google-coral/edgetpu#812): refused before the
    delegate is made, with the line doctor writes, in this process and in the engine's own; the stream's keeper
    says so and looks again only at its longest wait, not in the quick retries that read as a crash loop."""
    import threading

    from edge_inference.backends.base import BackendRefused
    from edge_inference.backends.edgetpu_runtime import pair_problem
    from edge_inference.backends.isolation import open_engine
    from edge_inference.edge.detection.keeper import MAX_LOAD_BACKOFF_S
    from tests.test_detector_keeper import Recorder, keeper_for
    from tests.test_watchdogs import wait_for

    installed_libedgetpu(monkeypatch, coral.parent / "dpkg", "libedgetpu1-std", "16.0")
    doctors = pair_problem("libedgetpu1-std 16.0", "tflite-runtime 2.17.1")
    assert doctors and "google-coral/edgetpu#812" in doctors
    with pytest.raises(BackendRefused) as here:
        open_backend("edgetpu", EDGETPU_MODEL, BackendOptions("usb"))
    with pytest.raises(BackendRefused) as isolated:
        open_engine("edgetpu", EDGETPU_MODEL, BackendOptions("usb"))
    assert str(here.value) == str(isolated.value) == f"cannot use the Edge TPU: {doctors}"
    assert not (coral.parent / "delegates-made").exists()
    stop, recorder = threading.Event(), Recorder()
    keeper = keeper_for(
        lambda: load_detector(DetectorConfig(str(EDGETPU_MODEL), "edgetpu", "usb")), stop, recorder,
        first_backoff_s=0.05,
    )  # fmt: skip
    loading = threading.Thread(target=keeper.load, daemon=True)
    loading.start()
    failures = lambda: [error for state, error in recorder.states if state == "failed"]  # noqa: E731
    error = wait_for(failures, "the refusal", seen=lambda: recorder.states)[0]
    assert error and doctors in error and f"looked at again in {MAX_LOAD_BACKOFF_S:g} s" in error
    stop.wait(1.0)  # twenty quick retries' time
    assert recorder.load_failures == 1, recorder.states
    stop.set()
    loading.join(30)


@pytest.mark.process
def test_a_pair_nobody_checked_loads_with_a_warning(coral, monkeypatch):
    from edge_inference.backends.edgetpu_runtime import INSTALL_PAIR

    installed_libedgetpu(monkeypatch, coral.parent / "dpkg", "libedgetpu1-std", "16.0tf2.16.1-1.bookworm")
    backend = open_backend("edgetpu", EDGETPU_MODEL, BackendOptions("usb"))
    assert backend.notes == [
        "libedgetpu1-std 16.0tf2.16.1-1.bookworm was built for TF 2.16 and the runtime is tflite-runtime 2.17.1: "
        "install tflite_runtime 2.16.x, or the libedgetpu build for TF 2.17 (a pair not known to work)"
    ]
    installed_libedgetpu(monkeypatch, coral.parent / "dpkg", "libedgetpu1-std", "16.0+self-built")
    said = open_backend("edgetpu", EDGETPU_MODEL, BackendOptions("usb")).notes
    assert said == [
        f"libedgetpu1-std 16.0+self-built with tflite-runtime 2.17.1 is not a pair known to work: if the Edge TPU "
        f"engine crashes, {INSTALL_PAIR}"
    ]
    assert (coral.parent / "delegates-made").read_text() == "delegate\n" * 2
