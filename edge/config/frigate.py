"""Frigate's config, read as this one: a camera pasted into `streams:` (its ffmpeg inputs, detect size, objects and
zones), or a whole Frigate file given to `edge serve --config`. In a whole file, cameras become streams, the first
detector and the model the streams' engine and model, Frigate's global detect, ffmpeg, objects and motion blocks
each camera's defaults (merged as Frigate merges them), `{FRIGATE_*}` the environment's values, and a go2rtc
restream address the camera it restreams. What Frigate does and this service does not (recording, snapshots, review,
birdseye, ...) is left out and named in notes printed at start; a key that neither knows is still refused."""

from __future__ import annotations

import difflib
import re
from typing import Any

from edge_inference.edge.errors import counted


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# A Frigate camera's keys with no place in a stream; its other blocks are read below
CAMERA_ONLY = _words(
    "audio audio_transcription best_image_timeout birdseye enabled_in_config face_recognition friendly_name genai "
    "live lpr mqtt notifications onvif profiles record review semantic_search snapshots timestamp_style triggers type "
    "ui webui_url"
)
# Frigate's top-level blocks with no place here (cameras, detectors, model, mqtt and the camera defaults are read)
FILE_ONLY = _words(
    "active_profile audio audio_transcription auth birdseye camera_groups classification database environment_vars "
    "face_recognition genai go2rtc live logger lpr networking notifications profiles proxy record review safe_mode "
    "semantic_search snapshots telemetry timestamp_style tls ui version"
)
CAMERA_DEFAULTS = ("detect", "ffmpeg", "objects", "motion")  # global blocks Frigate copies into every camera
CAMERA_READ = _words("name enabled zones") | set(CAMERA_DEFAULTS)  # a Frigate camera's keys read as a stream's
FILE_READ = _words("cameras detectors model mqtt") | set(CAMERA_DEFAULTS)  # Frigate's top-level keys read here
# Keys of the blocks read that have no place here, by block
LEFT_OUT = {
    "ffmpeg": _words("global_args output_args retry_interval path apple_compatibility gpu"),
    "detect": _words("min_initialized max_disappeared stationary annotation_offset"),
    "objects": _words("mask raw_mask genai"),
    "motion": _words(
        "lightning_threshold skip_motion_threshold improve_contrast contour_area delta_alpha frame_alpha frame_height "
        "mqtt_off_delay enabled_in_config raw_mask"
    ),
    "zone": _words("objects inertia loitering_time friendly_name distances speed_threshold filters enabled_in_config"),
    "filter": _words("min_area max_area min_ratio max_ratio threshold mask raw_mask"),
    "mqtt": _words("tls_client_cert tls_client_key tls_insecure qos"),
}
MQTT_NAMES = {"stats_interval": "stats_interval_s", "tls_ca_certs": "ca_file"}

# Frigate's detector types -> the engine here that runs what they run
DETECTOR_ENGINES = {
    "cpu": "tflite",
    "edgetpu": "edgetpu",
    "openvino": "openvino",
    "onnx": "onnx",
    "tensorrt": "onnx",
    "rknn": "rknn",
    "hailo8l": "hailo",
}
# The model files inside Frigate's image, and the registry's model of the same weights (the Coral's SSD); OpenVINO's
# default there is SSDLite, the nearest here is the same SSD
BUILT_IN_MODELS = {
    "/cpu_model.tflite": "ssd-mobilenet-v2",
    "/edgetpu_model.tflite": "ssd-mobilenet-v2",
    "/openvino-model/ssdlite_mobilenet_v2.xml": "ssd-mobilenet-v2",
}
BUILT_IN_LABELS = ("/labelmap.txt", "/labelmap/coco-80.txt", "/labelmap/coco.txt", "/openvino-model/coco_91cl_bkgr.txt")
DEFAULT_MODELS = {  # what Frigate runs on these detectors when its config names no model
    "cpu": "/cpu_model.tflite",
    "edgetpu": "/edgetpu_model.tflite",
    "openvino": "/openvino-model/ssdlite_mobilenet_v2.xml",
}
# Frigate's presets by the name of their twin here (edge/stream/ffmpeg.py): restreams are read from the camera, so
# they are plain RTSP
INPUT_PRESET_HERE = {
    "preset-rtsp-restream": "preset-rtsp-generic",
    "preset-rtsp-restream-low-latency": "preset-rtsp-generic",
    "preset-rtsp-blue-iris": "preset-rtsp-generic",
}
HWACCEL_PRESET_HERE = {"preset-nvidia-h264": "preset-nvidia", "preset-nvidia-h265": "preset-nvidia"}
FRIGATE_ENV = re.compile(r"(?<!\$)\{(FRIGATE_[A-Za-z0-9_]+)\}")  # Frigate's `{FRIGATE_RTSP_PASSWORD}`
RESTREAM = re.compile(r"rtsp://(?:127\.0\.0\.1|localhost):8554/([^/?#]+)")  # go2rtc inside Frigate's container
FRIGATE_MIN_SCORE = 0.5  # Frigate's own default for a label without a filter
FRIGATE_TRACKS = ["person"]  # what Frigate tracks when a camera names nothing


def is_frigate_file(data: dict[str, Any]) -> bool:
    """Frigate's cameras by name, each with its ffmpeg inputs (which Frigate requires); `cameras:` written for
    `streams:` in this config's own form is answered as that slip."""
    cameras = data.get("cameras")
    return (
        "streams" not in data
        and isinstance(cameras, dict)
        and any(isinstance(camera, dict) and "ffmpeg" in camera for camera in cameras.values())
    )


def from_frigate_file(
    data: dict[str, Any], own_keys: frozenset[str] = frozenset(), own_stream_keys: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], list[str]]:
    """A whole Frigate config as this service's, and the notes saying what was read as what and what was left
    out. Errors are ValueErrors naming their place (`cameras.door.motion.mask: ...`). `own_keys` and
    `own_stream_keys`: this config's top-level and stream settings, which a Frigate file may also hold; a key that
    is neither Frigate's nor one of them is refused in Frigate's terms (`detekt`: did you mean detect?)."""
    _refuse_unknown_keys(data, own_keys, own_stream_keys)
    data = _environment_braces(dict(data))
    notes: list[str] = []
    defaults = {key: data.pop(key) for key in CAMERA_DEFAULTS if isinstance(data.get(key), dict)}
    restreams = _restreams(data.get("go2rtc"))
    engine = _engine(data, notes)
    left_out = sorted(key for key in data if key in FILE_ONLY)
    for key in left_out:
        data.pop(key)
    if isinstance(data.get("mqtt"), dict):
        data["mqtt"] = _mqtt(data["mqtt"], left_out)
    cameras = data.pop("cameras")
    streams = _streams(cameras, defaults, engine, restreams, left_out, notes)
    if not streams and cameras:
        raise ValueError(
            f"cameras: none of {', '.join(map(str, cameras))} detects (each is enabled: false, or has detect: "
            "enabled: false, on the camera or in the global detect block); set detect: enabled: true to run them here"
        )
    data["streams"] = streams
    notes.insert(0, f"read as a Frigate config: {len(streams)} camera(s) as streams ({', '.join(streams) or 'none'})")
    if left_out:
        notes.append(f"left out, not done here: {', '.join(left_out)}")
    return data, notes


def _streams(
    cameras: dict[str, Any],
    defaults: dict[str, Any],
    engine: dict[str, Any],
    restreams: dict[str, str],
    left_out: list[str],
    notes: list[str],
) -> dict[str, Any]:
    """Each camera Frigate detects on as a stream, with the global blocks under its own and the file's engine."""
    streams = {}
    for name, camera in cameras.items():
        if not isinstance(camera, dict | None):  # refused as a stream, in the usual words
            streams[str(name)] = camera
            continue
        stream = _camera(_merged(defaults, camera or {}), restreams, f"cameras.{name}", left_out, notes)
        if stream is not None:
            streams[str(name)] = {**engine, **stream}
    return streams


def _refuse_unknown_keys(data: dict[str, Any], own_keys: frozenset[str], own_stream_keys: frozenset[str]) -> None:
    """Keys neither Frigate nor this config has, at the top and in each camera, all in one error."""
    if not own_keys:
        return  # called without this config's keys: the schema answers unknown keys in its own words
    problems = _unknown(data, FILE_READ | FILE_ONLY, own_keys, "", "a Frigate config")
    for name, camera in (data.get("cameras") or {}).items():
        if isinstance(camera, dict):
            frigate = CAMERA_READ | CAMERA_ONLY
            problems += _unknown(camera, frigate, own_stream_keys, f"cameras.{name}.", "a Frigate camera")
    if problems:
        raise ValueError("; ".join(problems))


def _unknown(block: dict[str, Any], frigate: frozenset[str], own: frozenset[str], where: str, what: str) -> list[str]:
    """Each key neither Frigate nor this config has, with the Frigate key it is nearest to where there is one."""
    problems = []
    for key in (str(key) for key in block if key not in frigate and key not in own):
        near = difflib.get_close_matches(key, sorted(frigate), n=1, cutoff=0.75)
        meant = f" (did you mean {near[0]}?)" if near else f"; {what} takes: {', '.join(sorted(frigate))}"
        problems.append(f"{where}{key}: not a setting of {what}{meant}")
    return problems


def _environment_braces(data: Any) -> Any:
    """Frigate's `{FRIGATE_MQTT_PASSWORD}` as this config's `${FRIGATE_MQTT_PASSWORD}`: read from the environment."""
    if isinstance(data, dict):
        return {key: _environment_braces(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_environment_braces(value) for value in data]
    return FRIGATE_ENV.sub(r"${\1}", data) if isinstance(data, str) else data


def _merged(defaults: dict[str, Any], camera: dict[str, Any]) -> dict[str, Any]:
    """Frigate's deep merge: the camera's own values over the global ones."""
    merged = dict(defaults)
    for key, value in camera.items():
        base = merged.get(key)
        merged[key] = _merged(base, value) if isinstance(base, dict) and isinstance(value, dict) else value
    return merged


def _engine(data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The first of Frigate's detectors as the streams' backend and device, and its model as their model."""
    detectors = data.get("detectors")
    model = data.pop("model", None)
    if not isinstance(detectors, dict) or not any(
        isinstance(d, dict) and "type" in d for d in detectors.values()
    ):  # none (Frigate's CPU detector, which this service's `auto` replaces), or this file's own
        return _model(model, None, notes)
    data.pop("detectors")
    name, detector = next((n, d) for n, d in detectors.items() if isinstance(d, dict) and "type" in d)
    kind = str(detector.get("type", "")).lower()
    if kind not in DETECTOR_ENGINES:
        raise ValueError(
            f"detectors.{name}: Frigate's {kind} detector has no engine here; this service runs edgetpu (Coral), "
            "openvino, onnx (CPU, CUDA, TensorRT), tflite (Frigate's cpu), rknn and hailo"
        )
    engine = {"backend": DETECTOR_ENGINES[kind], "device": _device(kind, detector.get("device"))}
    if kind == "cpu" and detector.get("num_threads"):
        engine["threads"] = detector["num_threads"]
    others = [other for other in detectors if other != name]
    shown = f"{engine['backend']}, device {engine['device']}"
    notes.append(f"detector {name} ({kind}) runs as backend {shown}")
    if others:
        notes.append(f"detectors {', '.join(others)} left out: streams here share one engine per model and device")
    return {**engine, **_model(model, kind, notes)}


def _device(kind: str, device: Any) -> str:
    if kind == "tensorrt":
        return "tensorrt"
    if device is None or kind in ("cpu", "rknn", "hailo8l"):
        return "auto"
    if kind == "onnx":  # Frigate's AUTO, CPU, GPU: ONNX Runtime here picks CUDA where it can, else the CPU
        return "cpu" if str(device).upper() == "CPU" else "auto"
    return str(device)  # edgetpu's usb, usb:0, pci; OpenVINO's CPU, GPU, NPU, AUTO: written alike here


def _model(model: Any, kind: str | None, notes: list[str]) -> dict[str, Any]:
    """Frigate's `model.path` as the streams' model; its built-in files as the registry's model of those weights."""
    model = model if isinstance(model, dict) else {}
    path = model.get("path") or DEFAULT_MODELS.get(kind or "")
    if not isinstance(path, str):
        return {}
    if path.startswith("plus://"):
        raise ValueError(
            f"model.path {path}: a Frigate+ model, which Frigate downloads with its API key; give the model file "
            "(Frigate keeps it in /config/model_cache/) or leave model out"
        )
    if "labelmap" in model:
        notes.append("model.labelmap is not read: give the names it changes in a label file (model.labelmap_path)")
    if path in BUILT_IN_MODELS:
        notes.append(f"model {path} is Frigate's built-in file: the registry's {BUILT_IN_MODELS[path]} runs instead")
        return {"model": BUILT_IN_MODELS[path]}  # with its own labels, which Frigate's built-in label map lists
    return {"model": path, **_model_input(model, notes)}


def _model_input(model: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """What Frigate is told of a model of one's own that its file does not say: its labels and colour order. The
    input's size, layout and type and the decoder are read from the file here."""
    given: dict[str, Any] = {}
    labels = model.get("labelmap_path")
    if isinstance(labels, str) and labels not in BUILT_IN_LABELS:
        given["labels"] = labels
    elif labels in BUILT_IN_LABELS:
        notes.append(f"model.labelmap_path {labels} is Frigate's built-in COCO list: the model's own labels are used")
    pixels = str(model.get("input_pixel_format", "rgb")).lower()
    if pixels == "yuv":
        raise ValueError(
            "model.input_pixel_format yuv: a model that takes YUV frames cannot run here; export it for rgb or bgr"
        )
    if pixels == "bgr":
        given["color"] = "BGR"
    return given


def _mqtt(mqtt: dict[str, Any], left_out: list[str]) -> dict[str, Any]:
    ours = {MQTT_NAMES.get(key, key): value for key, value in mqtt.items() if key not in LEFT_OUT["mqtt"]}
    left_out += [f"mqtt.{key}" for key in mqtt if key in LEFT_OUT["mqtt"]]
    return ours


def _camera(
    camera: dict[str, Any], restreams: dict[str, str], where: str, left_out: list[str], notes: list[str]
) -> dict[str, Any] | None:
    """A Frigate camera as a stream, or None for one that Frigate does not detect on (disabled)."""
    detect = camera.get("detect")
    if camera.get("enabled") is False or (isinstance(detect, dict) and detect.get("enabled") is False):
        notes.append(f"{where} left out: it is disabled, or does not detect, in the Frigate config")
        return None
    stream = {key: value for key, value in camera.items() if key not in CAMERA_ONLY and key != "enabled"}
    left_out += [f"{where}.{key}" for key in camera if key in CAMERA_ONLY]
    for block in ("ffmpeg", "detect", "objects"):
        if isinstance(stream.get(block), dict):
            stream[block] = _without(stream[block], LEFT_OUT[block], f"{where}.{block}", left_out)
    if isinstance(stream.get("ffmpeg"), dict):
        stream["ffmpeg"] = _ffmpeg(stream["ffmpeg"], restreams, where, notes)
    stream["objects"] = _objects(stream.get("objects", {}), f"{where}.objects", left_out)
    stream["motion"] = _motion(stream.get("motion"), f"{where}.motion", left_out)
    if isinstance(stream.get("zones"), dict):
        stream["zones"] = _zones(stream["zones"], f"{where}.zones", left_out)
    return stream


def _zones(zones: dict[str, Any], where: str, left_out: list[str]) -> dict[str, Any]:
    """Zones as Frigate keys them, less those switched off and the keys with no place here."""
    kept = {name: dict(zone or {}) for name, zone in zones.items() if (zone or {}).get("enabled") is not False}
    return {
        name: _without({k: v for k, v in zone.items() if k != "enabled"}, LEFT_OUT["zone"], f"{where}.{name}", left_out)
        for name, zone in kept.items()
    }


def _objects(objects: Any, where: str, left_out: list[str]) -> Any:
    """What Frigate tracks (people, where the camera names nothing) and each label's least score."""
    if not isinstance(objects, dict):
        return objects
    filters = objects.get("filters") or {}
    return {
        **objects,
        "track": objects.get("track", list(FRIGATE_TRACKS)),
        "filters": {
            label: _without(limits or {}, LEFT_OUT["filter"], f"{where}.filters.{label}", left_out)
            for label, limits in filters.items()
        },
    }


def _without(block: dict[str, Any], keys: frozenset[str], where: str, left_out: list[str]) -> dict[str, Any]:
    left_out += [f"{where}.{key}" for key in block if key in keys]
    return {key: value for key, value in block.items() if key not in keys}


def _ffmpeg(ffmpeg: dict[str, Any], restreams: dict[str, str], where: str, notes: list[str]) -> dict[str, Any]:
    """Frigate's presets as named here, `hwaccel_args: auto` as software decoding (said), and an input that is
    Frigate's go2rtc restream as the camera address go2rtc reads."""
    ffmpeg = dict(ffmpeg)
    hwaccel = ffmpeg.get("hwaccel_args")
    if isinstance(hwaccel, str) and hwaccel.strip().lower() == "auto":
        ffmpeg.pop("hwaccel_args")
        notes.append(f"{where}.ffmpeg.hwaccel_args auto: decoded in software here; name a preset to decode on the GPU")
    elif isinstance(hwaccel, str):
        ffmpeg["hwaccel_args"] = HWACCEL_PRESET_HERE.get(hwaccel, hwaccel)
    inputs = [dict(i) if isinstance(i, dict) else i for i in ffmpeg.get("inputs") or []]
    for item in (i for i in inputs if isinstance(i, dict)):
        if isinstance(item.get("input_args"), str):
            item["input_args"] = INPUT_PRESET_HERE.get(item["input_args"], item["input_args"])
        _restreamed(item, restreams, where, notes)
    if isinstance(ffmpeg.get("input_args"), str):
        ffmpeg["input_args"] = INPUT_PRESET_HERE.get(ffmpeg["input_args"], ffmpeg["input_args"])
    if inputs:
        ffmpeg["inputs"] = inputs
    return ffmpeg


def _restreamed(item: dict[str, Any], restreams: dict[str, str], where: str, notes: list[str]) -> None:
    """An input reading Frigate's go2rtc restream reads the camera go2rtc reads."""
    restream = RESTREAM.match(str(item.get("path", "")))
    if restream and restream.group(1) in restreams:
        item["path"] = restreams[restream.group(1)]
        notes.append(f"{where}: go2rtc's restream {restream.group(1)} is read from the camera go2rtc reads")
    elif restream:  # a go2rtc of its own may serve it; Frigate's does not run here
        notes.append(
            f"{where}: {restream.group(0)} is a go2rtc restream, and go2rtc's streams have no RTSP or HTTP "
            f"address for {restream.group(1)}: it is read only if a go2rtc of its own runs here"
        )


def _restreams(go2rtc: Any) -> dict[str, str]:
    """go2rtc's streams by name -> the first RTSP or HTTP address of each (`ffmpeg:` and `#...` options taken off)."""
    streams = go2rtc.get("streams") if isinstance(go2rtc, dict) else None
    found = {}
    for name, sources in (streams or {}).items():
        for source in [sources] if isinstance(sources, str) else sources or []:
            address = str(source).removeprefix("ffmpeg:").split("#")[0].strip()
            if address.startswith(("rtsp://", "rtsps://", "http://", "https://")):
                found[str(name)] = address
                break
    return found


def _motion(motion: Any, where: str, left_out: list[str]) -> Any:
    """Frigate detects only where something moved, as `motion:` does here: on unless `enabled: false`. Its
    `threshold` (a pixel's change, 1-255) is `pixel_threshold`, its masks the regions motion `ignore`s."""
    if motion is None:
        return {}
    if not isinstance(motion, dict):
        return motion
    if motion.get("enabled") is False:
        return None
    ours = _without(motion, LEFT_OUT["motion"], where, left_out)
    ours.pop("enabled", None)
    if "threshold" in ours:
        ours["pixel_threshold"] = ours.pop("threshold")
    if "mask" in ours:
        ours["ignore"] = mask_polygons(ours.pop("mask"), f"{where}.mask")
    return ours


def mask_polygons(mask: Any, where: str) -> list[Any]:
    """Frigate's masks: one `x,y,x,y,...` text, a list of them, or (Frigate 0.17) masks by name with their
    `coordinates` and `enabled`."""
    if isinstance(mask, dict):
        items = [m.get("coordinates") for m in mask.values() if isinstance(m, dict) and m.get("enabled") is not False]
    elif isinstance(mask, list) and not all(isinstance(i, str) and i.count(",") == 1 for i in mask):
        items = mask
    else:
        items = [mask]
    try:
        return [points for points in map(points_from_text, items) if points]
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def points_from_text(value: Any) -> Any:
    """Frigate's coordinates, `545,1077,747,939,...` or a list of `x,y` strings, as [x, y] pairs."""
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        value = ",".join(value)
    if not isinstance(value, str):
        return value
    try:
        numbers = [float(part) for part in value.replace(";", ",").split(",") if part.strip()]
    except ValueError:
        return value  # pydantic's words on the text as written
    if len(numbers) % 2:
        raise ValueError(f"{counted(len(numbers), 'number')}: coordinates come in x,y pairs")
    return [numbers[i : i + 2] for i in range(0, len(numbers), 2)]


# A camera pasted into `streams:`: what of it is read; the rest is refused, named in one line
_CAMERA_READ = "width, height and fps of detect, objects.track and objects.filters.<label>.min_score are read"


def frigate_camera(stream: Any) -> Any:
    """A camera pasted from a Frigate config, as a stream: `ffmpeg.inputs`' detect input is the source (decoded by
    FFmpeg, as there), `ffmpeg.hwaccel_args` the hardware preset (the same names), `detect`'s width, height and fps
    the stream's, `objects.track` and each `objects.filters.<label>.min_score` its classes."""
    if not isinstance(stream, dict):
        return stream
    stream = dict(stream)
    if isinstance(stream.get("ffmpeg"), dict):
        stream["ffmpeg"] = _ffmpeg_inputs(stream, dict(stream["ffmpeg"]))
    unread: list[str] = []
    if isinstance(stream.get("detect"), dict):  # anything else is refused as not a setting, in the usual words
        for key, value in stream.pop("detect").items():
            if key in ("width", "height", "fps"):
                stream.setdefault(key, value)
            elif key != "enabled":
                unread.append(f"detect.{key}")
    if isinstance(stream.get("objects"), dict):
        stream.setdefault("classes", _classes(stream.pop("objects"), unread))
    if unread:
        raise ValueError(f"{', '.join(unread)}: Frigate's, with no place here ({_CAMERA_READ}); remove them")
    return stream


def _ffmpeg_inputs(stream: dict[str, Any], ffmpeg: dict[str, Any]) -> dict[str, Any]:
    if "hwaccel_args" in ffmpeg and "hwaccel" not in ffmpeg:
        ffmpeg["hwaccel"] = ffmpeg.pop("hwaccel_args")
    inputs = ffmpeg.get("inputs")
    if not isinstance(inputs, list) or "source" in stream:
        return ffmpeg  # inputs beside a source: refused as not a setting
    ffmpeg.pop("inputs")
    chosen = [i for i in inputs if isinstance(i, dict) and "detect" in (i.get("roles") or ["detect"])]
    if not chosen or "path" not in chosen[0]:
        raise ValueError("ffmpeg.inputs: none has the detect role and a path; give the stream's source: instead")
    stream["source"] = chosen[0]["path"]
    if chosen[0].get("input_args") and "input_args" not in ffmpeg:
        ffmpeg["input_args"] = chosen[0]["input_args"]
    return ffmpeg


def _classes(objects: dict[str, Any], unread: list[str]) -> Any:
    labels = list(objects.get("track") or [])
    scores = {}
    for label, limits in (objects.get("filters") or {}).items():
        for key, value in (limits or {}).items():
            if key == "min_score":
                scores[label] = value
            else:
                unread.append(f"objects.filters.{label}.{key}")
    unread += [f"objects.{key}" for key in objects if key not in ("track", "filters")]
    if scores:  # a filter on a label that is not tracked filters nothing, as in Frigate
        return {label: scores.get(label, FRIGATE_MIN_SCORE) for label in labels or scores}
    return labels
