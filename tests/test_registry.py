"""The model registry: pulls from a mirror folder or a loopback HTTP mirror, checksums, verify, licences."""

from __future__ import annotations

import functools
import json
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from edge_inference.models.download import ChecksumMismatchError, pull, sha256_of
from edge_inference.models.registry import DEFAULT_MODEL, REGISTRY, get_entry
from tests.conftest import MODELS
from tests.helpers import run_edge


@pytest.fixture()
def http_mirror():
    """The shared model folder served over real HTTP on loopback."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(MODELS))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_every_entry_matches_the_shared_mirror():
    for entry in REGISTRY.values():
        for file in entry.files:
            assert sha256_of(MODELS / file.path) == file.sha256, file.path


@pytest.mark.process
def test_defaults_are_never_agpl():
    assert not get_entry(DEFAULT_MODEL).agpl
    assert {"yolox-nano", "ssd-mobilenet-v2", "nanodet-m"} <= set(REGISTRY)
    proc = run_edge("models", "list", "--json")
    rows = json.loads(proc.stdout)
    assert [r["name"] for r in rows if r["default"]] == [DEFAULT_MODEL]
    assert all(r["license"] == "AGPL-3.0" for r in rows if r["name"].startswith("yolov8n"))


@pytest.mark.process
def test_pull_from_mirror_folder_then_verify_then_tamper(tmp_path):
    cache = tmp_path / "cache"
    proc = run_edge(
        "models", "pull", "yolox-nano", "yolox-nano-openvino", "--cache", str(cache), "--mirror", str(MODELS)
    )
    assert proc.returncode == 0, proc.stderr
    assert (cache / "onnx/yolox_nano.onnx").is_file() and (cache / "openvino/yolox_nano.bin").is_file()
    assert "yolox-nano: ok" in run_edge("models", "verify", "--cache", str(cache)).stdout
    with (cache / "onnx/yolox_nano.onnx").open("r+b") as handle:
        handle.write(b"\0\0\0\0")
    proc = run_edge("models", "verify", "yolox-nano", "--cache", str(cache))
    assert proc.returncode == 1 and "sha256 differs" in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.process
def test_pull_over_http_mirror(tmp_path, http_mirror):
    path = pull(get_entry("nanodet-m"), tmp_path, http_mirror)
    assert path == tmp_path / "onnx/nanodet_m.onnx" and sha256_of(path) == get_entry("nanodet-m").model_file.sha256


@pytest.mark.process
def test_checksum_mismatch_is_refused_and_leaves_nothing(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "onnx").mkdir(parents=True)
    shutil.copy(MODELS / "onnx/yolox_nano.onnx", mirror / "onnx/yolox_nano.onnx")
    with (mirror / "onnx/yolox_nano.onnx").open("ab") as handle:
        handle.write(b"tampered")
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumMismatchError, match="checksum mismatch"):
        pull(get_entry("yolox-nano"), cache, str(mirror))
    assert not any(p.is_file() for p in cache.rglob("*"))  # nothing stays, no lock file either
    proc = run_edge("models", "pull", "yolox-nano", "--cache", str(cache), "--mirror", str(mirror))
    assert proc.returncode == 1 and proc.stderr.startswith("error: checksum mismatch")
    assert "Traceback" not in proc.stderr


@pytest.mark.process
def test_a_mirror_cloned_without_git_lfs_is_named_as_such(tmp_path):
    """A mirror made with `git clone` and no git-lfs holds 130-byte pointers: that was "checksum mismatch ... check
    the mirror's copy", which sent users to compare hashes. Now it says what the file is and the command."""
    mirror = tmp_path / "mirror"
    (mirror / "onnx").mkdir(parents=True)
    oid = sha256_of(MODELS / "onnx/yolox_nano.onnx")
    size = (MODELS / "onnx/yolox_nano.onnx").stat().st_size
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"  # git-lfs's own form
    (mirror / "onnx/yolox_nano.onnx").write_text(pointer)
    cache = tmp_path / "cache"
    proc = run_edge("models", "pull", "yolox-nano", "--cache", str(cache), "--mirror", str(mirror))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(
        f"error: {mirror}/onnx/yolox_nano.onnx is a Git LFS pointer, not onnx/yolox_nano.onnx"
    )
    assert "git lfs pull" in proc.stderr and not any(p.is_file() for p in cache.rglob("*"))


@pytest.mark.process
def test_unreachable_mirror_and_converted_models_say_what_to_do(tmp_path):
    proc = run_edge("models", "pull", "yolox-nano", "--cache", str(tmp_path), "--mirror", "http://127.0.0.1:9/")
    assert proc.returncode == 1 and "cannot download" in proc.stderr and "EDGE_MODEL_MIRROR" in proc.stderr
    proc = run_edge("models", "pull", "ssd-mobilenet-v2-onnx", "--cache", str(tmp_path), env={"EDGE_MODEL_MIRROR": ""})
    assert proc.returncode == 1 and "no public download location" in proc.stderr


@pytest.mark.process
def test_detect_pulls_a_registry_model_on_first_use(tmp_path):
    cache = tmp_path / "cache"
    proc = run_edge(
        "detect",
        str(MODELS.parent / "media/cat_720p.jpg"),
        "-m",
        "ssd-mobilenet-v2",
        "--json",
        env={"EDGE_MODEL_CACHE": str(cache)},
    )
    assert proc.returncode == 0, proc.stderr
    assert (cache / get_entry("ssd-mobilenet-v2").model_file.path).is_file()
    assert "cat" in [d["label"] for d in json.loads(proc.stdout)["detections"]]


@pytest.mark.process
def test_a_swapped_cached_model_is_refused_when_loaded(tmp_path):
    cache = tmp_path / "cache"
    env = {"EDGE_MODEL_CACHE": str(cache), "EDGE_MODEL_MIRROR": str(MODELS)}
    photo = MODELS.parent / "media"
    image = next(p for p in sorted(photo.iterdir()) if p.suffix.lower() in (".jpg", ".png"))
    assert run_edge("detect", str(image), "-m", "yolox-nano", "--json", env=env).returncode == 0
    cached = cache / get_entry("yolox-nano").model_file.path
    assert cached.stat().st_mode & 0o777 == 0o644  # readable by a service running as another user
    shutil.copy(MODELS / "onnx" / "nanodet_m.onnx", cached)  # another valid model under the registry's name
    proc = run_edge("detect", str(image), "-m", "yolox-nano", "--json", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "does not match the registry's sha256" in proc.stderr and "edge models pull yolox-nano" in proc.stderr
    assert run_edge("models", "pull", "yolox-nano", env=env).returncode == 0  # the advice works
    assert sha256_of(cached) == get_entry("yolox-nano").model_file.sha256


def test_partial_files_left_by_a_killed_pull_are_removed(tmp_path):
    cache = tmp_path / "cache"
    folder = cache / "onnx"
    folder.mkdir(parents=True)
    stale = [folder / ".yolox_nano.onnx.abc123.part", folder / ".yolox_nano.onnx.zz9.part"]
    for path in stale:
        path.write_bytes(b"half a download")
    pull(get_entry("yolox-nano"), cache, str(MODELS))
    assert not any(path.exists() for path in stale)
    assert (folder / "yolox_nano.onnx").is_file()


@pytest.mark.process
def test_a_cache_that_cannot_be_written_says_where_to_put_it(tmp_path):
    """A system user whose home is a file or not theirs, `docker run --read-only`, a full disk: "unexpected OSError:
    [Errno 30] Read-only file system ... report it" before; now what to set. (A file where the folder should be
    stands in for them: the same refusal to write, on any machine, as root or not.)"""
    from edge_inference.models.errors import ModelError

    blocker = tmp_path / "home"
    blocker.write_text("a file, not a folder")
    with pytest.raises(ModelError) as refused:
        pull(get_entry("yolox-nano"), blocker / ".cache/models", str(MODELS))
    assert f"cannot write the model cache {blocker / '.cache/models'} (" in str(refused.value)
    assert "set EDGE_MODEL_CACHE to a folder this user can write" in str(refused.value)
    proc = run_edge("detect", str(MODELS.parent / "media/cat_720p.jpg"), env={"EDGE_MODEL_CACHE": str(blocker)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "unexpected" not in proc.stderr
    assert proc.stderr.startswith(f"error: cannot write the model cache {blocker} ("), proc.stderr


@pytest.mark.process
def test_describe_takes_the_model_as_pull_does_and_describes_that_very_file():
    """`edge models describe yolox-nano` was refused (an extra argument) though `pull yolox-nano` takes the name so;
    `--model yolox-nano` timed the engines and described the fastest one's own file (`yolox-nano-openvino`)."""
    for args in (("yolox-nano",), ("--model", "yolox-nano")):
        proc = run_edge("models", "describe", *args)
        assert proc.returncode == 0, proc.stderr
        described = json.loads(proc.stdout)
        assert (described["model"], described["backend"]) == ("yolox-nano", "onnx"), described
        assert "--backend auto: timing" not in proc.stderr
    other = json.loads(run_edge("models", "describe", "yolox-nano-openvino").stdout)
    assert (other["model"], other["backend"]) == ("yolox-nano-openvino", "openvino")


@pytest.mark.process
def test_verify_says_what_of_a_compiled_file_runs_on_the_edge_tpu(tmp_path):
    """`edge models verify` reads an Edge TPU file's operations: the compiled segments and what the compiler left on
    the CPU (each frame waits for those); a file compiled for the CPU only says so; a missing one is one line."""
    tflite = MODELS / "tflite"
    coral = tflite / "ssd_mobilenet_v2_coco_quant_postprocess_edgetpu.tflite"
    cpu = tflite / "ssd_mobilenet_v2_coco_quant_postprocess.tflite"
    proc = run_edge("models", "verify", str(coral), str(cpu))
    assert proc.returncode == 0, proc.stderr
    said = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert said[coral.name].startswith("1 Edge TPU segment; none falls back")
    assert "post-processing" in said[coral.name]  # TFLite_Detection_PostProcess: on the CPU by design
    assert said[cpu.name].startswith("not compiled for the Edge TPU: all ")
    proc = run_edge("models", "verify", str(tmp_path / "gone_edgetpu.tflite"))
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
