"""`edge detect` as a user runs it: the JSON contract, --save, and one clear line for every bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import cv2
import pytest

from edge_inference.models.labels import LabelFileError, load_labels
from tests.conftest import MEDIA, MODELS, VTEST, skimage_photo
from tests.expectations import PHOTO_OBJECTS
from tests.helpers import provider_starts_here, run_edge, write_onnx_model

CAT = str(MEDIA / "cat_720p.jpg")
KEYS = {"source", "width", "height", "model", "backend", "detections", "timings_ms"}


@pytest.fixture(scope="module")
def photo_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    for name in PHOTO_OBJECTS:
        cv2.imwrite(str(folder / f"{name}.png"), skimage_photo(name))
    return folder


def assert_one_clear_error(proc, *fragments):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.mark.process
def test_json_lines_contract(photo_files):
    images = [str(photo_files / f"{n}.png") for n in sorted(PHOTO_OBJECTS)]
    proc = run_edge("detect", *images, "--model", "yolox-nano", "--json")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["source"] for r in records] == images
    for record, name in zip(records, sorted(PHOTO_OBJECTS), strict=True):
        assert set(record) == KEYS
        assert set(record["timings_ms"]) == {"preprocess", "inference", "postprocess"}
        # auto runs the engine measured fastest here, with that engine's file of the same weights
        engine, _, device = record["backend"].partition("/")
        assert engine in ("onnx", "openvino", "tflite") and device and record["model"].startswith("yolox-nano")
        labels = [d["label"] for d in record["detections"]]
        assert PHOTO_OBJECTS[name][0] in labels
        for d in record["detections"]:
            assert set(d) == {"label", "class_id", "score", "box"}
            x1, y1, x2, y2 = d["box"]
            assert 0 <= x1 < x2 <= record["width"] and 0 <= y1 < y2 <= record["height"]


@pytest.mark.process
def test_classes_reports_only_those_as_ultralytics_classes_does():
    """There was no way to ask for people only (Ultralytics' `classes=0`, Frigate's `objects: track:`): every kite
    and car came along. --classes keeps the named ones, by label or id, each box as it was (NMS is per class), and a
    name the model lacks is one line with the nearest label, not an empty answer."""
    photo = str(MEDIA / "kite_and_cold.jpg")
    model = ["-m", str(MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx"), "-b", "onnx", "--json"]
    everything = json.loads(run_edge("detect", photo, *model).stdout)["detections"]
    people = [d for d in everything if d["label"] == "person"]
    assert people and len(people) < len(everything)  # kites too
    by_name = run_edge("detect", photo, *model, "--classes", "Person")
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout)["detections"] == people
    by_id = run_edge("detect", photo, *model, "--classes", f"{people[0]['class_id']}, kite")
    assert json.loads(by_id.stdout)["detections"] == [d for d in everything if d["label"] in ("person", "kite")]
    assert_one_clear_error(run_edge("detect", photo, *model, "--classes", "persn"), "'persn' (did you mean 'person'?)")


@pytest.mark.process
def test_table_and_save(photo_files, tmp_path):
    out = tmp_path / "boxes.jpg"
    proc = run_edge("detect", str(photo_files / "chelsea.png"), "-m", "yolox-nano", "--save", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "cat" in proc.stdout and "inference" in proc.stdout
    drawn = cv2.imread(str(out))
    assert drawn is not None and drawn.shape == skimage_photo("chelsea").shape
    assert cv2.absdiff(drawn, skimage_photo("chelsea")).max() > 100  # boxes were drawn


@pytest.mark.process
def test_a_folder_of_photos_runs_every_image_in_it(photo_files, tmp_path):
    """As Ultralytics' `source=folder/` does; a folder was refused as "not an image"."""
    (tmp_path / "empty").mkdir()
    proc = run_edge("detect", str(photo_files), str(tmp_path / "empty"), "-m", "yolox-nano", "--json")
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [Path(r["source"]).name for r in records] == sorted(f"{name}.png" for name in PHOTO_OBJECTS)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert (
        proc.returncode == 1
        and len(errors) == 1
        and "empty: a folder with no images (.avif, .bmp, .gif, .jpeg, .jpg, .png" in errors[0]
        and errors[0].endswith("or videos (.mp4, .mkv, ...)")
    )
    saved = tmp_path / "boxes"
    assert run_edge("detect", str(photo_files), "-m", "yolox-nano", "--save", str(saved)).returncode == 0
    assert sorted(p.name for p in saved.iterdir()) == sorted(f"{name}.jpg" for name in PHOTO_OBJECTS)


@pytest.mark.process
def test_a_video_runs_every_frame_as_ultralytics_predict_does(tmp_path):
    """`edge detect clip.mp4` said "this takes one image": Ultralytics' `predict source=clip.mp4` users run every
    frame. Now: one JSON line per frame in order with its time, a summary table, and --save writes the video."""
    capture, clip = cv2.VideoCapture(str(VTEST)), tmp_path / "walkway.mp4"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter.fourcc(*"mp4v"), 10, (768, 576))
    for _ in range(12):  # people walk through every frame of vtest.avi's start
        writer.write(capture.read()[1])
    writer.release()
    capture.release()
    model = ["-m", str(MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx"), "-b", "onnx"]
    proc = run_edge("detect", str(clip), *model, "--json", "--save", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    frames = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [f["frame"] for f in frames] == list(range(12)) and [f["time_s"] for f in frames] == [
        i / 10 for i in range(12)
    ]
    assert all(set(f) >= KEYS and f["source"] == str(clip) for f in frames)
    assert all(any(d["label"] == "person" for d in f["detections"]) for f in frames)
    saved = cv2.VideoCapture(str(tmp_path / "out/walkway.mp4"))
    assert (saved.get(cv2.CAP_PROP_FRAME_COUNT), saved.get(cv2.CAP_PROP_FPS)) == (12, 10)
    assert (saved.get(cv2.CAP_PROP_FRAME_WIDTH), saved.get(cv2.CAP_PROP_FRAME_HEIGHT)) == (768, 576)
    saved.release()
    table = run_edge("detect", str(clip), *model)
    assert table.returncode == 0, table.stderr
    header, columns, *rows = table.stdout.splitlines()
    assert header.startswith(f"{clip}  12 frames, 768x576 at 10 fps  ") and "inference" in header
    assert columns.split() == ["label", "frames", "most", "at", "once"]
    person = next(row.split() for row in rows if row.split()[0] == "person")
    most = max(sum(d["label"] == "person" for d in f["detections"]) for f in frames)
    assert person == ["person", "12", str(most)]
    folder = tmp_path / "mixed"  # a folder runs its videos too, in name order with its photos
    folder.mkdir()
    shutil.copy(clip, folder / "b-walkway.mp4")
    shutil.copy(MEDIA / "cat_720p.jpg", folder / "a-cat.jpg")
    mixed = run_edge("detect", str(folder), *model, "--json")
    sources = [Path(json.loads(line)["source"]).name for line in mixed.stdout.splitlines()]
    assert mixed.returncode == 0 and sources == ["a-cat.jpg"] + ["b-walkway.mp4"] * 12, mixed.stderr
    (tmp_path / "notes.mp4").write_text("not a video")
    assert_one_clear_error(run_edge("detect", str(tmp_path / "notes.mp4"), *model), "notes.mp4: ", "FFmpeg")


@pytest.mark.process
@pytest.mark.parametrize(
    "name, muxer",
    [("export", "mp4"), ("clip.MOD", "mpeg"), ("cam1.MTS", "mpegts"), ("dump.raw", "h264"), ("hall.bin", "matroska")],
)
def test_a_video_is_known_by_its_bytes_whatever_it_is_called(tmp_path, name, muxer):
    """An NVR's export with no suffix, a camcorder's .MOD/.MTS or an RTSP dump went to the image reader: "not a
    readable image", after the model was loaded. Now its first bytes say it is a video, and every frame runs."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        pytest.skip("needs Debian's ffmpeg (the README's test command installs it)")
    clip = tmp_path / name
    encode = ["-frames:v", "6", "-c:v", "mpeg2video" if muxer == "mpeg" else "libx264", "-f", muxer, str(clip)]
    subprocess.run([ffmpeg, "-loglevel", "error", "-i", str(VTEST), *encode], check=True, timeout=120)
    model = ["-m", str(MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx"), "-b", "onnx"]
    proc = run_edge("detect", str(clip), *model, "--json")
    assert proc.returncode == 0, proc.stderr
    frames = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [f["frame"] for f in frames] == list(range(6))
    assert all(any(d["label"] == "person" for d in f["detections"]) for f in frames)


@pytest.mark.process
def test_bad_images_each_get_one_line_and_good_ones_still_run(tmp_path):
    (tmp_path / "text.jpg").write_text("this is not an image\n")
    (tmp_path / "empty.jpg").write_bytes(b"")
    data = (MEDIA / "kite_and_cold.jpg").read_bytes()
    (tmp_path / "truncated.jpg").write_bytes(data[: len(data) * 2 // 3])
    bad = {
        "missing.jpg": "no such file",
        "text.jpg": "not a readable image",
        "empty.jpg": "empty",
        "truncated.jpg": "truncated",
    }
    args = [str(tmp_path / n) for n in bad] + [str(MEDIA / "cat_720p.jpg")]
    proc = run_edge("detect", *args, "-m", "yolox-nano", "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("note:")]
    assert len(lines) == len(bad)
    for line, (name, fragment) in zip(lines, bad.items(), strict=True):
        assert line.startswith("error:") and name in line and fragment in line
    assert json.loads(proc.stdout)["source"].endswith("cat_720p.jpg")


@pytest.mark.process
def test_model_file_that_is_not_a_model(tmp_path):
    fake = tmp_path / "model.onnx"
    fake.write_text("not a model")
    assert_one_clear_error(
        run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", str(fake)), "model.onnx", "ONNX", "export it again"
    )


@pytest.mark.process
@pytest.mark.parametrize("backend", ["tflite", "openvino"])
def test_a_model_cut_short_by_a_copy_says_to_copy_it_again(tmp_path, backend):
    whole = (MODELS / "tflite/yolox_nano_float16_quantize.tflite").read_bytes()
    cut = tmp_path / "yolox_nano.tflite"
    cut.write_bytes(whole[: len(whole) // 2])
    proc = run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", str(cut), "-b", backend)
    assert_one_clear_error(proc, "yolox_nano.tflite", "damaged, incomplete", "copy, download or export it again")


@pytest.mark.process
def test_openvino_ir_without_its_weights_names_the_missing_file(tmp_path):
    shutil.copy(MODELS / "openvino/yolox_nano.xml", tmp_path)
    proc = run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", str(tmp_path / "yolox_nano.xml"))
    assert_one_clear_error(proc, "yolox_nano.xml", "needs its weights yolox_nano.bin beside it")


@pytest.mark.process
@pytest.mark.parametrize(
    "name, fragment",
    [
        (
            "yolov8n.pt",
            "is a PyTorch checkpoint, which no engine here runs: export it to ONNX and give the .onnx "
            "(Ultralytics: yolo export model=yolov8n.pt format=onnx;",
        ),
        (
            "yolov8n.engine",
            "is a TensorRT engine, built for one GPU and one TensorRT version, which no engine here "
            "runs: give the ONNX model it was built from with --device tensorrt",
        ),
        (
            "yolox_nano.bin",
            "is weights alone (OpenVINO's, or ncnn's), which no engine here runs: give the OpenVINO .xml beside it",
        ),
        ("weights.safetensors", "is weights without the network that uses them"),
    ],
)
def test_a_model_in_a_format_no_engine_runs_says_what_to_give_instead(tmp_path, name, fragment):
    """`-m yolov8n.pt`, as Ultralytics users pass it, was "no installed engine can run yolov8n.pt"."""
    (tmp_path / name).write_bytes(b"PK\x03\x04" + bytes(200))
    assert_one_clear_error(run_edge("detect", CAT, "-m", str(tmp_path / name)), f"{tmp_path / name} {fragment}")


@pytest.mark.process
@pytest.mark.parametrize("name", ["yolox_nano.onnx", "model.tflite", "model.xml"])
def test_a_git_lfs_pointer_for_a_model_says_to_pull_it(tmp_path, name):
    """A model repository cloned without git-lfs: each engine's parser error ("Protobuf parsing failed", "not a valid
    Flatbuffer") after `auto` had tried every engine on it. Now one line before any engine loads."""
    oid = "4d7a2146d1e9b2d5c3e7a2c0d7b1e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0"
    (tmp_path / name).write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize 3795422\n")
    proc = run_edge("detect", CAT, "-m", str(tmp_path / name))
    assert_one_clear_error(proc, f"{tmp_path / name} is a Git LFS pointer (", "run `git lfs pull`")
    assert "--backend auto" not in proc.stderr  # refused before any engine was timed on it


@pytest.mark.process
def test_missing_model_file_and_unknown_registry_name():
    assert_one_clear_error(run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", "/nowhere/x.onnx"), "does not exist")
    assert_one_clear_error(
        run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", "yolox-giant"), "yolox-giant", "edge models list"
    )


@pytest.mark.parametrize(
    "name, fragment",
    [
        # the registry's name but for case and `_`, as a user types a model's name from its paper or repository
        ("YOLOX_nano", "no model named 'YOLOX_nano' in the registry (did you mean yolox-nano?)"),
        ("nanodet", "(did you mean nanodet-m?)"),
        ("yolov8n", "(did you mean one of: yolov8n-int8-onnx, yolov8n-int8-tflite,"),
        # Ultralytics fetches `yolov8n.pt` by name; here no file and no engine: said, with the export to run
        ("yolov8n.pt", "model file yolov8n.pt does not exist; and yolov8n.pt is a PyTorch checkpoint, which no engine"),
    ],
)
def test_a_model_named_as_users_name_it_is_answered_with_the_registry_name_it_means(
    tmp_path, monkeypatch, name, fragment
):
    from edge_inference.edge.detection.model_files import resolve_model
    from edge_inference.edge.errors import EdgeError
    from edge_inference.models.errors import ModelError

    monkeypatch.chdir(tmp_path)
    with pytest.raises((EdgeError, ModelError)) as refused:
        resolve_model(name, [])
    assert fragment in str(refused.value)


@pytest.mark.process
def test_unknown_output_layout_lists_outputs_and_decoder_option(tmp_path):
    model = write_onnx_model(tmp_path / "classifier.onnx", [1, 3, 224, 224], [1, 1000])
    proc = run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", str(model))
    assert_one_clear_error(proc, "output [1, 1000]", "--decoder")


@pytest.mark.process
def test_forced_decoder_is_checked_and_sidecar_settings_apply(tmp_path):
    # A decoder that cannot read these outputs is refused with the layout it expected...
    model = tmp_path / "renamed.onnx"
    shutil.copy(MODELS / "onnx/yolox_nano.onnx", model)
    proc = run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", str(model), "--decoder", "nanodet")
    assert_one_clear_error(proc, "decoder 'nanodet' expects", "output [1, 3549, 85]")
    # ...and a sidecar's settings are used, with labels from a file next to it.
    (tmp_path / "names.txt").write_text("\n".join(f"thing{i}" for i in range(80)))
    (tmp_path / "renamed.onnx.yaml").write_text("decoder: yolox\nlabels: names.txt\n")
    proc = run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", str(model), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["detections"][0]["label"] == "thing15"  # COCO class 15 is cat


@pytest.mark.process
def test_label_files_saved_by_windows_editors_read_as_written(tmp_path):
    """Notepad's UTF-8 starts with a byte-order mark, which became part of the first label ("\\ufeffperson", matched
    by nothing in a config); its "Unicode" is UTF-16, which was refused with a codec's words."""
    names = ["personne", *(f"chose{i}" for i in range(1, 80))]
    names[15] = "félin"
    marked, wide, latin = tmp_path / "marked.txt", tmp_path / "wide.txt", tmp_path / "latin.txt"
    marked.write_bytes("\r\n".join(names).encode("utf-8-sig"))
    wide.write_bytes("\r\n".join(names).encode("utf-16"))
    latin.write_bytes("\n".join(names).encode("latin-1"))
    assert load_labels(marked) == load_labels(wide) == dict(enumerate(names))
    with pytest.raises(LabelFileError, match=r"latin.txt is not UTF-8 text \(byte 0xe9 on line 16\): save it as UTF-8"):
        load_labels(latin)
    model = str(MODELS / "onnx/yolox_nano.onnx")
    proc = run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", model, "--labels", str(wide), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["detections"][0]["label"] == "félin"
    proc = run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", model, "--labels", str(latin))
    assert_one_clear_error(proc, "latin.txt is not UTF-8 text", "save it as UTF-8")


@pytest.mark.process
def test_invalid_sidecar_is_explained(tmp_path):
    model = tmp_path / "m.onnx"
    shutil.copy(MODELS / "onnx/yolox_nano.onnx", model)
    (tmp_path / "m.yaml").write_text("decoder: yolox\ncolour: RGB\n")
    assert_one_clear_error(run_edge("detect", str(MEDIA / "cat_720p.jpg"), "-m", str(model)), "m.yaml", "colour")


@pytest.mark.process
def test_cuda_runs_where_it_starts_and_fails_unless_fallback_is_asked_where_not():
    image = str(MEDIA / "cat_720p.jpg")
    if provider_starts_here("CUDAExecutionProvider", MODELS / "onnx/yolox_nano.onnx"):  # a GPU machine
        on_cpu = json.loads(run_edge("detect", image, "-m", "yolox-nano", "-d", "cpu", "--json").stdout)
        proc = run_edge("detect", image, "-m", "yolox-nano", "-d", "cuda", "--json")
        assert proc.returncode == 0 and "ExecutionProvider" not in proc.stderr, proc.stderr  # no fallback note
        on_gpu = json.loads(proc.stdout)
        assert on_gpu["backend"] == "onnx/CUDAExecutionProvider:0"
        assert [d["label"] for d in on_gpu["detections"]] == [d["label"] for d in on_cpu["detections"]]
        return
    assert_one_clear_error(
        run_edge("detect", image, "-m", "yolox-nano", "-d", "cuda"),
        "CUDAExecutionProvider",
        "onnxruntime-gpu",
        "--fallback",
    )
    proc = run_edge("detect", image, "-m", "yolox-nano", "-d", "cuda", "--fallback", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "note:" in proc.stderr and "fell back" not in proc.stderr and "CPUExecutionProvider" in proc.stderr
    assert "on cuda" not in proc.stderr  # no note claims a device that did not run
    assert json.loads(proc.stdout)["backend"] == "onnx/CPUExecutionProvider"
    assert_one_clear_error(run_edge("detect", image, "-m", "yolox-nano", "-d", "tpu"), "no device 'tpu'")


@pytest.mark.process
def test_a_registry_name_runs_the_engines_own_file_and_the_default_model_needs_no_flag():
    image = str(MEDIA / "cat_720p.jpg")
    proc = run_edge("detect", image, "--backend", "tflite", "--json")  # yolox-nano, the default, as TFLite
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["model"] == "yolox-nano-tflite" and record["backend"].startswith("tflite")
    assert any(d["label"] == "cat" for d in record["detections"])
    assert_one_clear_error(
        run_edge("detect", image, "--backend", "edgetpu", "-m", "nanodet-m"), "no nanodet-m file that edgetpu can run"
    )


@pytest.mark.process
def test_inputs_are_checked_before_anything_is_loaded(tmp_path):
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    env = {"EDGE_MODEL_MIRROR": str(empty), "EDGE_MODEL_CACHE": str(tmp_path / "cache")}
    proc = run_edge("detect", str(tmp_path / "missing.jpg"), "-m", "yolox-nano", env=env)
    assert_one_clear_error(proc, "missing.jpg: no such file")  # not the mirror's error: nothing was fetched
    assert "note:" not in proc.stderr and not (tmp_path / "cache").exists()


@pytest.mark.process
def test_a_reader_that_has_what_it_wanted_ends_the_run_without_a_word():
    """`edge detect clip.mp4 --json | head -1` printed "error: unexpected BrokenPipeError ... report it"."""
    import sys

    child = subprocess.Popen(
        [sys.executable, "-m", "edge_inference", "detect", str(VTEST), "--json", "-b", "onnx"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    first = json.loads(child.stdout.readline())
    child.stdout.close()  # as `head -1` does once it has its line
    try:
        child.wait(timeout=120)
    finally:
        child.kill()
    assert first["source"] == str(VTEST) and child.returncode == 1
    assert child.stderr.read() == ""


def _on_a_terminal(*args: str) -> tuple[int, str, str]:
    """`edge ARGS` with stderr on a pseudo-terminal of 100 columns (a user's terminal), stdout on a pipe: (exit
    status, what the terminal showed, stdout)."""
    import fcntl
    import os
    import pty
    import struct
    import sys
    import termios

    terminal, child_end = pty.openpty()
    fcntl.ioctl(child_end, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_inference", *args], stdout=subprocess.PIPE, stderr=child_end, text=True
    )
    os.close(child_end)
    shown = b""
    while True:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        shown += chunk
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait(timeout=120)
    os.close(terminal)
    return proc.returncode, shown.decode(errors="replace"), out


@pytest.mark.process
def test_a_video_shows_its_progress_on_a_terminal_and_nowhere_else(tmp_path):
    """`edge detect clip.avi` ran 795 frames for 30 s with nothing on the terminal. A progress bar is drawn there,
    on stderr, counting the video's frames; `--json`'s lines on stdout and a log (no terminal) stay clean."""
    capture, clip = cv2.VideoCapture(str(VTEST)), tmp_path / "walkway.avi"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter.fourcc(*"MJPG"), 10, (768, 576))
    for _ in range(30):
        writer.write(capture.read()[1])
    writer.release()
    capture.release()
    model = ["-m", str(MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx"), "-b", "onnx"]
    status, shown, out = _on_a_terminal("detect", str(clip), *model, "--json")
    assert status == 0, shown
    assert "walkway.avi:" in shown and "0/30 [" in shown and "frame/s" in shown, shown  # the bar, with its total
    assert len(out.splitlines()) == 30 and all(line.startswith("{") for line in out.splitlines())
    logged = run_edge("detect", str(clip), *model)
    assert logged.returncode == 0 and "/30 [" not in logged.stderr and "\r" not in logged.stderr, logged.stderr


def test_ctrl_c_while_the_command_imports_ends_it_without_a_traceback(monkeypatch, capsys):
    """The interrupt arrives inside an import (here: as the command's own module is read), as a user's Ctrl-C in
    the second `edge` takes to start on a Pi: exit status 130 and nothing printed, not 30 lines of traceback."""
    import sys
    import types

    from edge_inference.cli import main

    class Interrupted(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "edge_inference.cli.app", Interrupted("edge_inference.cli.app"))
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 130
    assert capsys.readouterr().err == ""


def test_every_model_flag_is_a_stream_key_built_by_the_one_builder():
    """`--decoder` and `--resize` were only flags, and the command line built its detector in a builder of its own
    that drifted from the config's (issue 82): every model flag now names a stream key, read through the same
    `StreamConfig` and `runtime/plan.py`'s builder as a config's streams."""
    import click

    from edge_inference.cli.options import FLAG_KEYS, detector_config, detector_options
    from edge_inference.edge.config import StreamConfig
    from edge_inference.edge.runtime.plan import detector_config as plan_builder

    command = click.command()(detector_options(lambda **kwargs: None))
    flags = {param.name for param in command.params}
    assert flags == set(FLAG_KEYS) and set(FLAG_KEYS.values()) <= set(StreamConfig.model_fields)
    written = {"model": "yolox-nano", "decoder": "yolox", "resize": "stretch", "color": "BGR", "classes": ["car"]}
    as_parsed = {"classes": ("car",), "engine_option": {}, "fallback": False}  # as click hands them over
    from_flags = detector_config({flag: written.get(key) for flag, key in FLAG_KEYS.items()} | as_parsed)
    from_config = plan_builder(StreamConfig(id="cam", source="cam.mp4", **written))  # type: ignore[arg-type]
    assert from_flags.overrides == from_config.overrides and from_flags.overrides  # decoder, resize, colour: both ways
    assert (from_flags.model, from_flags.classes) == (from_config.model, from_config.classes)
    # and the other way: every stream key the builder reads is a flag (regions: `edge detect --tiles`)
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(plan_builder))
    read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "stream"}
    stream_keys = ({"classes"} if "class_scores" in read else set()) | (read & set(StreamConfig.model_fields))
    assert len(stream_keys) > 10 and stream_keys - {"regions"} <= set(FLAG_KEYS.values()), stream_keys
