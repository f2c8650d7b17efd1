"""The triton engine against a real Triton Inference Server (NVIDIA's PyTriton, `tests/triton.py`) serving the
repository `edge models export-triton` writes: the same detections as the local ONNX engine, over HTTP and gRPC,
with and without shared memory; streams sharing one connection with requests in flight; a server that goes away
mid-stream and comes back; and one clear line for each mistake."""

from __future__ import annotations

import contextlib
import json
import time

import numpy as np
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_inference.backends.triton_client import parse_reference
from tests.conftest import MEDIA, MODELS, VTEST
from tests.helpers import run_edge, write_clip
from tests.server import free_port, running_server
from tests.test_cli_detect import assert_one_clear_error
from tests.triton import TritonServer, export

YOLOX = MODELS / "onnx" / "yolox_nano.onnx"
SSD = MODELS / "onnx" / "ssd_mobilenet_v2_coco_quant_postprocess.onnx"
NANODET = MODELS / "onnx" / "nanodet_m.onnx"
PHOTOS = [str(MEDIA / "cat_720p.jpg"), str(MEDIA / "kite_and_cold.jpg")]


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    folder = tmp_path_factory.mktemp("triton-repository")
    export(folder, str(YOLOX), "yolox_nano")
    export(folder, str(SSD), "ssd")
    export(folder, str(NANODET), "nanodet")
    export(folder, str(YOLOX), "yolox_tensor", max_batch_size=0, pixels=False)  # `--input tensor`: its own input
    return folder


@pytest.fixture(scope="module")
def triton(repository, tmp_path_factory):
    models = ["yolox_nano", "ssd", "nanodet", "yolox_tensor"]
    server = TritonServer(repository, models, tmp_path_factory.mktemp("triton") / "triton.log")
    server.start()
    yield server
    server.stop()


def records(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def assert_same_detections(remote: list[dict], local: list[dict]) -> None:
    assert len(remote) == len(local)
    for theirs, ours in zip(remote, local, strict=True):
        assert theirs["source"] == ours["source"]
        assert [d["label"] for d in theirs["detections"]] == [d["label"] for d in ours["detections"]]
        for a, b in zip(theirs["detections"], ours["detections"], strict=True):
            assert a["score"] == pytest.approx(b["score"], abs=1e-3)
            assert a["box"] == pytest.approx(b["box"], abs=0.5)


@pytest.mark.system
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("memory", ["auto", "off"])
def test_photos_give_the_local_engines_detections(triton, protocol, memory):
    reference = getattr(triton, protocol)("yolox_nano")
    remote = run_edge(
        "detect", *PHOTOS, "--model", reference, "--json", "--engine-option", f"triton.shared_memory={memory}"
    )
    local = run_edge("detect", *PHOTOS, "--model", str(YOLOX), "--backend", "onnx", "--json")
    found = records(remote)
    assert all(
        r["backend"].startswith("triton/") and f":{getattr(triton, f'{protocol}_port')}" in r["backend"] for r in found
    )
    assert any(d["label"] == "cat" for d in found[0]["detections"])
    assert_same_detections(found, records(local))
    said = "system shared memory" if memory == "auto" else "shared memory"
    assert (said in remote.stderr) == (memory == "auto"), remote.stderr


@pytest.mark.system
def test_a_big_frame_on_tiles_through_the_server_gives_the_local_engines_tiles(triton, tmp_path):
    """`--tiles auto` on a 4K photo: 33 regions, each a request of the server's (its dynamic batcher may batch them
    with other boxes'), merged as the local engine's are."""
    import cv2

    big = tmp_path / "big.jpg"
    cv2.imwrite(str(big), cv2.resize(cv2.imread(PHOTOS[0]), (3840, 2160)))
    remote = records(run_edge("detect", str(big), "--model", triton.grpc("yolox_nano"), "--tiles", "auto", "--json"))
    local = records(run_edge("detect", str(big), "--model", str(YOLOX), "--backend", "onnx", "--tiles", "auto",
                             "--json"))  # fmt: skip
    assert remote[0]["regions"] == local[0]["regions"] and remote[0]["regions"]["inferences"] == 33
    assert_same_detections(remote, local)


@pytest.mark.system
def test_a_model_served_with_its_own_float_input_gives_the_same_detections(triton):
    """The export's default takes pixels (uint8, a quarter of the float tensor's bytes, cast and normalised on the
    server); a model that keeps its own float input (`--input tensor`, or exported elsewhere) is fed that tensor."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{triton.grpc_port}")
    assert client.get_model_metadata("yolox_nano").inputs[0].datatype == "UINT8"
    assert client.get_model_metadata("yolox_tensor").inputs[0].datatype == "FP32"
    client.close()
    pixels = records(run_edge("detect", *PHOTOS, "--model", triton.grpc("yolox_nano"), "--json"))
    tensor = records(run_edge("detect", *PHOTOS, "--model", triton.grpc("yolox_tensor"), "--json"))
    assert any(d["label"] == "cat" for d in tensor[0]["detections"])
    assert_same_detections(tensor, pixels)


@pytest.mark.system
@pytest.mark.parametrize(("name", "path"), [("ssd", SSD), ("nanodet", NANODET)])
def test_other_layouts_find_their_decoders_from_the_servers_metadata(triton, name, path):
    """An SSD (four outputs, a uint8 NHWC input) and NanoDet (one output of its own layout): the decoder comes from
    the server's metadata, as for a local file."""
    remote = records(run_edge("detect", *PHOTOS, "--model", triton.grpc(name), "--json"))
    local = records(run_edge("detect", *PHOTOS, "--model", str(path), "--backend", "onnx", "--json"))
    assert any(d["label"] == "cat" for d in remote[0]["detections"])
    assert_same_detections(remote, local)


@pytest.mark.system
def test_video_frames_give_the_local_engines_detections(triton, tmp_path):
    clip = write_clip(VTEST, tmp_path / "clip.avi", 12)
    remote = records(run_edge("detect", str(clip), "--model", triton.grpc("yolox_nano"), "--json"))
    local = records(run_edge("detect", str(clip), "--model", str(YOLOX), "--backend", "onnx", "--json"))
    assert len(remote) == 12 and sum(len(r["detections"]) for r in remote) > 12  # pedestrians in every frame
    for record in remote + local:
        record.pop("engine_threads", None)  # the local loop's own measurement
    assert_same_detections(remote, local)


@pytest.mark.system
def test_the_exported_repository_batches_where_the_model_allows(repository):
    """YOLOX's export fixes its batch at 1 in three reshapes: made dynamic and checked; the SSD's cannot be."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    yolox = text_format.Parse((repository / "yolox_nano" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    ssd = text_format.Parse((repository / "ssd" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert yolox.max_batch_size == 8 and yolox.HasField("dynamic_batching")
    # pixels in, a quarter of the float tensor's bytes: the cast, layout and normalisation run on the server
    assert list(yolox.input[0].dims) == [416, 416, 3] and yolox.input[0].data_type == model_config_pb2.TYPE_UINT8
    assert yolox.backend == "onnxruntime" and (repository / "yolox_nano" / "1" / "model.onnx").is_file()
    assert ssd.max_batch_size == 0 and not ssd.HasField("dynamic_batching")
    # NanoDet's exporter listed its 200 weights among the graph's inputs: Triton would have asked clients for them
    nanodet = text_format.Parse((repository / "nanodet" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert [i.name for i in nanodet.input] == ["input.1_pixels"]  # one input: its pixels


@pytest.mark.process
def test_export_triton_command_says_both_sides(tmp_path):
    proc = run_edge("models", "export-triton", str(SSD), str(tmp_path), "--name", "ssd_cam")
    assert proc.returncode == 0, proc.stderr
    assert "tritonserver --model-repository" in proc.stdout and "triton+grpc://SERVER:8001/ssd_cam" in proc.stdout
    assert "one frame at a time" in proc.stderr  # the fixed batch, said
    bad = run_edge(
        "models", "export-triton", str(MODELS / "tflite" / "yolox_nano_float16_quantize.tflite"), str(tmp_path)
    )
    assert_one_clear_error(bad, "ONNX")


@pytest.mark.process
def test_a_server_that_does_not_answer_is_one_line():
    proc = run_edge("detect", PHOTOS[0], "--model", f"triton+grpc://127.0.0.1:{free_port()}/yolox_nano")
    assert_one_clear_error(proc, "does not answer", "is tritonserver running")


@pytest.mark.system
def test_a_model_the_server_lacks_is_one_line(triton):
    proc = run_edge("detect", PHOTOS[0], "--model", triton.http("yolov9"))
    assert_one_clear_error(proc, "no model 'yolov9' ready")


@pytest.mark.system
def test_an_engine_that_cannot_run_a_server_model_is_one_line(triton):
    proc = run_edge("detect", PHOTOS[0], "--model", triton.http("yolox_nano"), "--backend", "onnx")
    assert_one_clear_error(proc, "backend triton (or auto) runs it")
    proc = run_edge("detect", PHOTOS[0], "--model", str(YOLOX), "--backend", "triton")
    assert_one_clear_error(proc, "triton runs models on a server", "export-triton")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("triton://10.0.0.5:8000/yolox_nano", ("http", False, "10.0.0.5", 8000, "yolox_nano", "")),
        ("triton+grpc://gpu-box/yolo/3", ("grpc", False, "gpu-box", 8001, "yolo", "3")),
        ("triton+https://[::1]:443/m", ("http", True, "[::1]", 443, "m", "")),
        ("triton+grpc:/127.0.0.1:8001/m", ("grpc", False, "127.0.0.1", 8001, "m", "")),  # a Path of one
        ("triton+grcp://host:8001/m", None),
        ("triton://host:8000/", None),
    ],
)
def test_references(text, expected):
    found = parse_reference(text)
    assert (found and (found.protocol, found.tls, found.host, found.port, found.model, found.version)) == expected


def _grpc_connections(pid: int, port: int) -> int:
    return sum(
        1
        for c in psutil.Process(pid).net_connections("tcp")
        if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"
    )


@pytest.mark.system
def test_two_streams_share_one_connection_and_the_server_batches_them(repository, tmp_path):
    """Two files read as fast as the engine allows (each frame wanted, in lanes), on one model over gRPC: one
    engine, its lanes requests in flight on one TCP connection; Triton's statistics show executions of two
    requests or more (in flight together, batched by the server's dynamic batcher)."""
    import tritonclient.grpc as grpcclient

    server = TritonServer(repository, ["yolox_nano"], tmp_path / "triton.log").start()
    try:
        model = server.grpc("yolox_nano")
        config = tmp_path / "edge.yaml"
        config.write_text(
            "streams:\n"
            + "".join(
                f"  - id: cam{i}\n    source: {VTEST}\n    model: {model}\n    loop: true\n    pace: false\n"
                for i in (1, 2)
            )
        )
        with running_server(["--config", str(config)], tmp_path / "edge.log") as edge:
            edge.wait_until("/health/live")
            for stream in ("cam1", "cam2"):
                edge.wait_for_frames(stream, 20, timeout=120)
            engines = edge.client.get("/api/v1/stats").json()["detectors"]
            assert len(engines) == 1 and sorted(engines[0]["streams"]) == ["cam1", "cam2"], engines
            assert engines[0]["lanes"] >= 2, engines  # requests in flight at once
            assert _grpc_connections(edge.process.pid, server.grpc_port) == 1
            deadline = time.monotonic() + 60  # the server's statistics are read every few seconds
            while (split := edge.client.get("/api/v1/stats").json()["detectors"][0]["server_ms"]) is None:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            # averages over the same few seconds, not over the very same requests: no order between them is asserted
            assert set(split) == {"round_trip_ms", "network_ms", "queue_ms", "compute_ms", "batch_size"}, split
            assert split["compute_ms"] > 0 and split["round_trip_ms"] > 0, split
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        stats = client.get_inference_statistics("yolox_nano", as_json=True)["model_stats"][0]
        sizes = {int(b["batch_size"]) for b in stats["batch_stats"]}
        assert max(sizes) >= 2, stats["batch_stats"]
    finally:
        server.stop()


@pytest.mark.system
def test_a_server_gone_mid_stream_is_said_and_the_stream_resumes_by_itself(repository, tmp_path):
    server = TritonServer(repository, ["yolox_nano"], tmp_path / "triton.log").start()
    try:
        config = tmp_path / "edge.yaml"
        config.write_text(
            f"streams:\n  - id: cam\n    source: {VTEST}\n    model: {server.grpc('yolox_nano')}\n    loop: true\n"
            f"  - id: local\n    source: {VTEST}\n    model: {YOLOX}\n    backend: onnx\n    loop: true\n"
        )
        with running_server(["--config", str(config)], tmp_path / "edge.log") as edge:
            edge.wait_until("/health/live")
            edge.wait_for_frames("cam", 10, timeout=120)
            server.kill()
            deadline = time.monotonic() + 30
            while edge.client.get("/health/ready").json()["status"] != "degraded":
                assert time.monotonic() < deadline, edge.client.get("/health/ready").json()
                time.sleep(0.2)
            stream = edge.client.get("/api/v1/streams/cam").json()
            assert "does not answer" in (stream.get("error") or ""), stream
            local = edge.wait_for_frames("local", 1)["frames_processed"]
            edge.wait_for_frames("local", local + 10)  # nothing else stopped
            server.start()
            before = edge.client.get("/api/v1/stats").json()["streams"]["cam"]["frames_processed"]
            edge.wait_for_frames("cam", before + 10, timeout=60)
            deadline = time.monotonic() + 30
            while edge.client.get("/health/ready").json()["status"] != "ok":
                assert time.monotonic() < deadline, edge.client.get("/health/ready").json()
                time.sleep(0.2)
        assert "Traceback" not in edge.log
    finally:
        server.stop()


@pytest.mark.system
def test_serve_check_runs_a_frame_on_the_server(triton, tmp_path):
    proc = run_edge("serve", "--check", "--source", PHOTOS[0], "--model", triton.grpc("yolox_nano"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gone = run_edge("serve", "--check", "--source", PHOTOS[0], "--model", f"triton://127.0.0.1:{free_port()}/m")
    assert gone.returncode != 0 and "does not answer" in gone.stdout + gone.stderr
    assert "Traceback" not in gone.stdout + gone.stderr


def test_path_of_reference_is_not_anchored_to_the_config_folder(tmp_path):
    from edge_inference.edge.config.paths import anchored_model

    assert anchored_model("triton+grpc://gpu:8001/yolox_nano", tmp_path) == "triton+grpc://gpu:8001/yolox_nano"


@pytest.mark.process
def test_the_engine_is_listed_with_its_options():
    proc = run_edge("backends", "--json")
    assert proc.returncode == 0, proc.stderr
    found = {b["key"]: b for b in json.loads(proc.stdout)}
    assert found["triton"]["available"] is True, found["triton"]
    assert "triton.shared_memory" in run_edge("backends").stdout


@pytest.mark.system
def test_doctor_tells_a_server_that_answers_from_one_that_does_not(triton):
    gone = f"triton://127.0.0.1:{free_port()}/yolox_nano"
    proc = run_edge("doctor", "--json", "--server", triton.grpc("yolox_nano"), "--server", gone)
    findings = {f["subject"]: f for f in json.loads(proc.stdout)["findings"] if f["section"] == "servers"}
    answering = findings[triton.grpc("yolox_nano")]
    assert answering["status"] == "ok" and "yolox_nano ready" in answering["detail"], answering
    assert findings[gone]["status"] == "warn" and "does not answer" in findings[gone]["detail"], findings[gone]
    assert "tritonserver" in findings[gone]["fix"]


@pytest.mark.system
def test_bench_scores_the_server_against_the_local_engine(triton, tmp_path):
    """`--backends onnx,triton+grpc://...`: the server's model runs beside the local one on the same frames."""
    remote = triton.grpc("yolox_nano")
    proc = run_edge(
        "bench", "-s", str(VTEST), "--models", str(YOLOX), "--backends", f"onnx,{remote}", "--frames", "6",
        "--warmup", "1", "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {r["backend"]: r for r in json.loads((tmp_path / "bench.json").read_text())["pairs"]}
    assert rows["onnx"]["reference"] and rows[remote]["status"] == "ok", rows
    assert rows[remote]["map50"] == pytest.approx(1.0, abs=0.01), rows[remote]  # the same network, elsewhere
    assert rows[remote]["cpu_ms_per_frame"] < rows["onnx"]["cpu_ms_per_frame"]


@pytest.mark.system
def test_live_comparison_of_the_local_engine_and_the_server(triton, tmp_path):
    remote = triton.grpc("yolox_nano")
    args = ["--source", str(VTEST), "--loop", "--model", str(YOLOX), "--compare", f"onnx,{remote}"]
    with running_server(args, tmp_path / "edge.log") as edge:
        edge.wait_until("/health/live")
        deadline = time.monotonic() + 120
        while True:
            rows = {r["backend"]: r for r in edge.client.get("/api/v1/compare").json()[0]["backends"]}
            if rows.get("triton", {}).get("agreement", {}).get("map50") is not None:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.5)
    assert set(rows) == {"onnx", "triton"} and rows["triton"]["stream"] == "main-triton"
    assert rows["triton"]["agreement"]["map50"] > 0.9, rows["triton"]


def test_auto_never_sends_a_local_file_to_a_server():
    from edge_inference.backends.discovery import choose_backend
    from edge_inference.edge.detection.model_files import model_for_engine

    assert choose_backend(YOLOX).backend != "triton"
    assert model_for_engine(str(YOLOX), "triton")[0] is None  # so auto's measurement never times it either


@pytest.mark.system
def test_a_restricted_server_takes_shared_memory_with_its_token(repository, tmp_path):
    """PyTriton restricts shared memory and statistics to a token by default (Triton's --grpc-restricted-protocol):
    without it, `system` is refused in one line; with the token in `headers`, tensors go through shared memory."""
    from edge_inference.backends import BackendError
    from edge_inference.edge.detection.loader import DetectorConfig, load_detector

    server = TritonServer(repository, ["yolox_nano"], tmp_path / "triton.log", access_token="s3cret").start()
    try:
        model = server.grpc("yolox_nano")
        with pytest.raises(BackendError, match="refused system shared memory"):
            load_detector(DetectorConfig(model, engine_options={"triton": {"shared_memory": "system"}}))
        headers = {"triton-grpc-protocol-triton-access-token": "s3cret"}
        options = {"triton": {"shared_memory": "system", "headers": headers}}
        detector = load_detector(DetectorConfig(model, engine_options=options))
        try:
            assert any("system shared memory" in note for note in detector.backend.notes)
            import cv2

            found = detector.detect(cv2.imread(PHOTOS[0]))
            assert any(d.label == "cat" for d in found.detections)
        finally:
            detector.close()
    finally:
        server.stop()


@pytest.mark.system
def test_a_server_too_slow_for_timeout_s_is_one_line_and_then_answers_again(triton):
    """A server that stops answering mid-stream (stopped by a signal: connected, never replying) is told as slow, not
    as gone; once it answers again, so does the engine."""
    import os
    import signal

    import cv2

    from edge_inference.backends import BackendError
    from edge_inference.edge.detection.loader import DetectorConfig, load_detector

    options = {"triton": {"timeout_s": 1}}
    detector = load_detector(DetectorConfig(triton.grpc("yolox_nano"), engine_options=options))
    photo = cv2.imread(PHOTOS[0])
    try:
        detector.detect(photo)
        os.killpg(triton.process.pid, signal.SIGSTOP)
        try:
            with pytest.raises(BackendError, match="took longer than timeout_s"):
                detector.detect(photo)
        finally:
            os.killpg(triton.process.pid, signal.SIGCONT)
        assert any(d.label == "cat" for d in detector.detect(photo).detections)
    finally:
        detector.close()


@given(
    protocol=st.sampled_from(["http", "grpc"]),
    tls=st.booleans(),
    host=st.from_regex(r"[a-z0-9][a-z0-9-]{0,15}(\.[a-z0-9-]{1,8}){0,3}", fullmatch=True),
    port=st.integers(1, 65535),
    model=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}", fullmatch=True),
    version=st.one_of(st.just(""), st.integers(1, 10_000).map(str)),
)
def test_any_reference_reads_back_as_written(protocol, tls, host, port, model, version):
    """The reference a backend reports (its `url`) names the same server and model when read again, also as a Path
    makes it (one slash after the scheme)."""
    from pathlib import Path

    from edge_inference.backends.triton_client import TritonReference

    reference = TritonReference(protocol, tls, host, port, model, version)
    assert parse_reference(reference.url) == reference
    assert parse_reference(str(Path(reference.url))) == reference


@pytest.mark.system
def test_a_server_not_there_at_start_is_waited_for(repository, tmp_path):
    """`edge serve` before the GPU box is up: the stream says so and loads once the server answers."""
    server = TritonServer(repository, ["yolox_nano"], tmp_path / "triton.log")
    args = ["--source", str(VTEST), "--loop", "--model", server.grpc("yolox_nano")]
    try:
        with running_server(args, tmp_path / "edge.log") as edge:
            edge.wait_until("/health/live")
            deadline = time.monotonic() + 60
            while "does not answer" not in (edge.client.get("/api/v1/streams/main").json().get("error") or ""):
                assert time.monotonic() < deadline, edge.client.get("/api/v1/streams/main").json()
                time.sleep(0.2)
            server.start()
            edge.wait_for_frames("main", 5, timeout=120)
        assert "Traceback" not in edge.log
    finally:
        server.stop()


@pytest.mark.system
def test_grpc_over_tls_with_the_servers_certificate(repository, tmp_path):
    """`triton+grpcs://` with `ca_file`: a server whose certificate it names is reached; without it, one line."""
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = TritonServer(repository, ["yolox_nano"], tmp_path / "triton.log", grpc_tls=(cert, key)).start()
    try:
        model = f"triton+grpcs://127.0.0.1:{server.grpc_port}/yolox_nano"
        trusted = run_edge("detect", PHOTOS[0], "--model", model, "--json", "--engine-option", f"triton.ca_file={cert}")
        assert any(d["label"] == "cat" for d in records(trusted)[0]["detections"])
        assert_one_clear_error(run_edge("detect", PHOTOS[0], "--model", model, "--engine-option",
                                        "triton.timeout_s=2"), "Triton server")  # fmt: skip
    finally:
        server.stop()


@pytest.mark.system
def test_regions_a_killed_box_left_on_the_server_are_dropped_at_its_next_start_and_none_after_a_stop(triton):
    """Triton keeps a registered region's mapping until it restarts: a box SIGKILLed while streaming left its pair
    there at every run. Regions are named by machine and process, so the next start finds the dead ones and drops
    them (and says so); another box's region is left alone, and a clean stop leaves none of its own."""
    import os
    import subprocess
    import sys

    import tritonclient.http as httpclient
    from tritonclient.utils import shared_memory as shm

    from edge_inference.backends import BackendOptions, open_backend
    from edge_inference.backends.triton_backend import REGION_PREFIX

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = [f"{REGION_PREFIX}{gone.pid}-0-in", f"{REGION_PREFIX}{gone.pid}-0-out"]
    others = ["edge-0badc0de-1-0-in"]  # another machine's box: its process is none of ours to judge
    client = httpclient.InferenceServerClient(f"127.0.0.1:{triton.http_port}")
    handles = [shm.create_shared_memory_region(name, "/" + name, 4096) for name in stale + others]

    def registered() -> list[str]:
        return [region["name"] for region in client.get_system_shared_memory_status()]

    mine = f"{REGION_PREFIX}{os.getpid()}-"
    earlier = {n for n in registered() if n.startswith(mine)}  # other tests' engines in this process, still open
    try:
        for name in stale + others:
            client.register_system_shared_memory(name, "/" + name, 4096)
        options = BackendOptions(engine_options={"shared_memory": "system"})
        backend = open_backend("triton", triton.http("yolox_nano"), options)
        try:
            now = registered()
            assert not set(stale) & set(now) and set(others) <= set(now), now
            assert any("dropped 2 shared-memory regions" in note for note in backend.notes), backend.notes
            assert {n for n in now if n.startswith(mine)} == earlier, now  # the load's trial pair: given back
            backend.run(np.full(backend.inputs[0].shape, 114, backend.inputs[0].dtype))
            assert len({n for n in registered() if n.startswith(mine)} - earlier) == 2  # a lane's: in and out
        finally:
            backend.close()
        assert {n for n in registered() if n.startswith(mine)} == earlier
    finally:
        for name in others:
            client.unregister_system_shared_memory(name)
        for handle in handles:
            with contextlib.suppress(Exception):  # the stale ones' files were removed with them
                shm.destroy_shared_memory_region(handle)
        client.close()
