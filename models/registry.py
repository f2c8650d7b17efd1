"""Named, checksummed detector models with their upstream locations, licences and descriptions."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from edge_inference.models.errors import ModelError

_KAZUHITO = "https://github.com/Kazuhito00/YOLOX-ONNX-TFLite-Sample/raw/main/model/"
_CORAL = "https://github.com/google-coral/test_data/raw/master/"
_KOUSH = "https://github.com/koush/tflite-models/raw/"


@dataclass(frozen=True)
class RegistryFile:
    path: str  # relative path inside the cache and inside a mirror
    sha256: str
    url: str | None  # None: produced locally (converted), available from a mirror only


@dataclass(frozen=True)
class RegistryEntry:
    name: str
    description: str
    license: str
    files: tuple[RegistryFile, ...]  # the first one is what the engine opens
    agpl: bool = False
    # Engines known to run it, when some engine that reads its format cannot (a missing operation, say).
    only_engines: tuple[str, ...] | None = None
    # The same weights in other formats share a family; `edge bench --models FAMILY` picks the file per engine.
    family: str = ""
    # Why its detections differ from its family's other files beyond rounding (another NMS, another quantisation):
    # said under `edge bench`'s table, where the agreement figure is read
    differs: str = ""

    @property
    def model_file(self) -> RegistryFile:
        return self.files[0]

    @property
    def family_name(self) -> str:
        return self.family or self.name


def _one(path: str, sha256: str, url: str | None) -> tuple[RegistryFile, ...]:
    return (RegistryFile(path, sha256, url),)


REGISTRY: dict[str, RegistryEntry] = {
    e.name: e
    for e in (
        RegistryEntry(
            "yolox-nano",
            "YOLOX-nano, COCO 80 classes, ONNX float32, 416x416, BGR 0..255",
            "Apache-2.0",
            _one(
                "onnx/yolox_nano.onnx",
                "695e750a5d5754bb5a8d5325643b59282191a7e7a564e435a415fd3c578eab14",
                _KAZUHITO + "yolox_nano.onnx",
            ),
        ),
        RegistryEntry(
            "yolox-nano-tflite",
            "YOLOX-nano, float16-quantised TFLite (NCHW input kept)",
            "Apache-2.0",
            _one(
                "tflite/yolox_nano_float16_quantize.tflite",
                "6518faf758f5827fb8412c38d2240b7722027c299596518e1f94e678af1e6e29",
                _KAZUHITO + "yolox_nano_float16_quantize.tflite",
            ),
            family="yolox-nano",
        ),
        RegistryEntry(
            "yolox-nano-openvino",
            "YOLOX-nano as OpenVINO IR (fp16 weights), converted from the ONNX file",
            "Apache-2.0",
            (
                RegistryFile(
                    "openvino/yolox_nano.xml", "f86c57e29b3196bcb52fe48c234dbd3fe1a2719ba9914199c7fdae5a3a4961c5", None
                ),
                RegistryFile(
                    "openvino/yolox_nano.bin", "4cb66710c220f2c3cea95309780af829e9dc96fefa1ceb34a7fbee18e03c6274", None
                ),
            ),
            family="yolox-nano",
        ),
        RegistryEntry(
            "ssd-mobilenet-v2",
            "SSD MobileNet v2 COCO, uint8 quantised TFLite with detection post-process (Coral)",
            "Apache-2.0",
            _one(
                "tflite/ssd_mobilenet_v2_coco_quant_postprocess.tflite",
                "7046f31a72ec0045a57b94199144c96cf5840c7dc106b808b64a1ed5559aa0cd",
                _CORAL + "ssd_mobilenet_v2_coco_quant_postprocess.tflite",
            ),
            # OpenVINO's TFLite reader lacks the detection post-process op
            only_engines=("tflite",),
        ),
        RegistryEntry(
            "ssd-mobilenet-v2-edgetpu",
            "SSD MobileNet v2 COCO compiled for the Coral Edge TPU",
            "Apache-2.0",
            _one(
                "tflite/ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite",
                "1df6f563746346d656c58aa2ae801b32f2a29e4e4adee46a65aeac6decc5f887",
                _CORAL + "ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite",
            ),
            family="ssd-mobilenet-v2",
        ),
        RegistryEntry(
            "ssd-mobilenet-v2-onnx",
            "SSD MobileNet v2 COCO converted to ONNX with tf2onnx (uint8 input)",
            "Apache-2.0",
            _one(
                "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx",
                "a99749798b46f32640a920c44c4958899fd2d521fb3461b92cfe46b460af67ca",
                None,
            ),
            family="ssd-mobilenet-v2",
            differs=(
                "the conversion replaced TFLite's fast NMS with ONNX NonMaxSuppression, which keeps other borderline "
                "low-score boxes; against the TFLite file person and car agree 0.94-1.00, but mAP weighs rare classes "
                "as much as person, so the overall figure is about 0.6-0.7"
            ),
        ),
        RegistryEntry(
            "nanodet-m",
            "NanoDet-m, COCO 80 classes, ONNX float32, 416x416, GFL head",
            "Apache-2.0",
            _one(
                "onnx/nanodet_m.onnx",
                "4b82da9944b88577175ee23a459dce2e26e6e4be573def65b1055dc2d9720186",
                "https://github.com/hpc203/nanodet-opncv-dnn-cpp-python/raw/main/nanodet_m.onnx",
            ),
        ),
        RegistryEntry(
            "yolov8n-int8-onnx",
            "Ultralytics YOLOv8n, ORT dynamic int8, 640x640 (AGPL-3.0: test use only)",
            "AGPL-3.0",
            _one(
                "onnx/yolov8n_int8.onnx",
                "83de8f0d2cd521e00ae2b138c340a03dece35b060b3898509bdc69afff417312",
                "https://github.com/Lamri-Meriem/edge-object-detection/raw/main/yolov8n_int8.onnx",
            ),
            agpl=True,
            family="yolov8n-int8",
            differs=(
                "ONNX Runtime's dynamic int8 (weights only) and the TFLite file's full-integer quantisation are two "
                "conversions of the weights: against each other about 0.66 overall, person 0.6 and above"
            ),
        ),
        RegistryEntry(
            "yolov8n-int8-tflite",
            "Ultralytics YOLOv8n full-integer TFLite, 640x640 (AGPL-3.0)",
            "AGPL-3.0",
            _one(
                "tflite/yolov8n_full_integer_quant.tflite",
                "c676683d534cc000bdcb9f223a15e6e9ef2edca16e54175fba7a96a0f5c4ef7a",
                _KOUSH + "eab99ef5fd78/yolov8n/yolov8n_full_integer_quant.tflite",
            ),
            agpl=True,
            family="yolov8n-int8",
        ),
        RegistryEntry(
            "yolov8n-int8-320-tflite",
            "Ultralytics YOLOv8n full-integer TFLite, 320x320 (AGPL-3.0)",
            "AGPL-3.0",
            _one(
                "tflite/yolov8n_full_integer_quant_320.tflite",
                "4b843b230a63d1eb35473d17163a5d2c8888a17f7df2f7a7feac64a9eef95b55",
                _KOUSH + "419ea9d3bac5/yolov8n_full_integer_quant_320/yolov8n_full_integer_quant_320.tflite",
            ),
            agpl=True,
            family="yolov8n-int8-320",
        ),
        RegistryEntry(
            "yolov8n-int8-edgetpu",
            "Ultralytics YOLOv8n compiled for the Coral Edge TPU, 640x640 (AGPL-3.0)",
            "AGPL-3.0",
            _one(
                "tflite/yolov8n_full_integer_quant_edgetpu.tflite",
                "1bb661572ef9a97687b7daa6f7711bd4f4b9281a67b02428b3499d371a50d0dc",
                _KOUSH + "eab99ef5fd78/yolov8n/yolov8n_full_integer_quant_edgetpu.tflite",
            ),
            agpl=True,
            family="yolov8n-int8",
        ),
        RegistryEntry(
            "yolov8n-int8-320-edgetpu",
            "Ultralytics YOLOv8n for the Coral Edge TPU, 320x320 (AGPL-3.0)",
            "AGPL-3.0",
            _one(
                "tflite/yolov8n_full_integer_quant_320_edgetpu.tflite",
                "51d60741c66c579b5a20c5ea7cda639e30d4d1ed06d9db62370e225babbfad55",
                _KOUSH + "419ea9d3bac5/yolov8n_full_integer_quant_320/yolov8n_full_integer_quant_320_edgetpu.tflite",
            ),
            agpl=True,
            family="yolov8n-int8-320",
        ),
    )
}

DEFAULT_MODEL = "yolox-nano"  # Apache-2.0; AGPL models are never a default


def is_registry_name(name: str) -> bool:
    """A registry model's name, or the name of a family of them."""
    return name in REGISTRY or any(e.family_name == name for e in REGISTRY.values())


def get_entry(name: str) -> RegistryEntry:
    try:
        return REGISTRY[name]
    except KeyError:
        near = nearest_names(name)
        hint = f" (did you mean {near[0]}?)" if len(near) == 1 else ""
        hint = f" (did you mean one of: {', '.join(near)}?)" if len(near) > 1 else hint
        raise ModelError(
            f"no model named {name!r} in the registry{hint}; `edge models list` shows the names, "
            "or pass a path to a model file"
        ) from None


def nearest_names(name: str) -> list[str]:
    """Registry names a mistyped one may mean: the same but for case and `_` (`YOLOX_nano`), the names it begins
    (`yolov8n` -> each yolov8n file), or the closest spelling."""
    key = _plain(name)
    by_key = {_plain(entry): entry for entry in REGISTRY}
    if key in by_key:
        return [by_key[key]]
    starting = [entry for plain, entry in by_key.items() if key and plain.startswith(key)]
    if starting:
        return starting[:4]
    return [by_key[k] for k in difflib.get_close_matches(key, list(by_key), n=2, cutoff=0.75)]


def _plain(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")
