"""`edge models convert` run end to end on footage, each conversion minutes of CPU on a slow machine: apart from
test_convert.py (its checks and refusals) so that the two files run on two workers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from edge_inference.edge.tools.conversion.quantize import STEM_CONVS
from edge_inference.models.download import sha256_of
from tests.conftest import MEDIA, MODELS
from tests.helpers import run_edge
from tests.test_cli_detect import assert_one_clear_error

# the conversions' fixtures (pytest finds them by name here: the tests' parameters "redefine" them, for ruff)
from tests.test_convert import clip, convert, env, int8_weights, later_frame, left_open, silu_left_whole  # noqa: F401


@pytest.mark.process
@pytest.mark.parametrize(
    ("target", "engine", "files"),
    [
        ("onnx-int8", "onnx", ["yolox-nano-int8.onnx"]),
        ("openvino-int8", "openvino", ["yolox-nano-openvino-int8.xml", "yolox-nano-openvino-int8.bin"]),
    ],
)
def test_a_conversion_on_the_users_footage_is_judged_recorded_and_found_by_name(
    env, clip, later_frame, target, engine, files
):
    folder = Path(env["EDGE_MODEL_CACHE"]) / "converted"
    # another conversion of the same model in flight (another terminal, another camera): its partial file is its own.
    # Both used to write one partial name: each overwrote, then renamed away, the other's file
    folder.mkdir(parents=True)
    in_flight = folder / f".{files[0].replace('.', '.partial.', 1)}"
    in_flight.write_bytes(b"another conversion's model, half-written")
    proc = convert(env, clip, target)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = folder / files[0]
    assert all((folder / name).is_file() for name in files)
    assert in_flight.read_bytes() == b"another conversion's model, half-written"
    assert set(folder.glob(".*partial*")) == {in_flight}, list(folder.iterdir())
    assert yaml.safe_load(Path(f"{model}.yaml").read_text()) == {"decoder": "yolox"}  # the float model's decoder
    record = json.loads(Path(f"{model}.json").read_text())
    float_file = MODELS / "onnx" / "yolox_nano.onnx"  # the registry file, pulled from the mirror
    assert record["made_from"]["sha256"] == sha256_of(float_file) and record["target"] == target
    assert record["calibration"]["frames"] == 12 and record["evaluation"]["frames"] == 12
    assert record["calibration"]["source"] == str(clip)
    assert record["toolchain"].startswith("onnxruntime" if engine == "onnx" else "nncf")
    # the stem's convolutions keep float weights (a faint object's signal starts there), the body's are int8
    int8 = int8_weights(model, engine)
    assert int8[: STEM_CONVS + 1] == [False] * STEM_CONVS + [True] and sum(int8) > len(int8) // 2, int8
    if engine == "openvino":
        assert silu_left_whole(model), "NNCF quantised inside a SiLU: OpenVINO cannot fuse it into the convolution"
    table = record["table"]
    assert table["agreement_per_class"]["person"] >= 0.7, table  # the people of the clip, found by both
    assert table["int8"]["size_mib"] < table["float"]["size_mib"]
    assert "agreement with the float model" in proc.stdout and record["verdict"] in proc.stdout
    assert f"calibrated on 12 frames of {clip} (" in proc.stdout and record["notes"] == []  # all it asked for
    name = files[0].rsplit(".", 1)[0]
    # found by its name, on a frame of the same camera (calibrated on a street, it is that street's model)
    detected = run_edge("detect", str(later_frame), "--model", name, "--backend", engine, "--json", env=env)
    assert detected.returncode == 0, detected.stderr
    assert any(d["label"] == "person" for d in json.loads(detected.stdout)["detections"])
    # mistyped, the converted name is the one suggested (the registry's nearest names were, without it)
    mistyped = run_edge("detect", str(later_frame), "--model", name[:-1] + "9", "--backend", engine, env=env)
    assert_one_clear_error(mistyped, f"did you mean {name}, converted here?")
    described = json.loads(run_edge("models", "describe", name, "--backend", engine, env=env).stdout)
    assert described["conversion"]["made_from"]["sha256"] == record["made_from"]["sha256"]
    listed = json.loads(run_edge("models", "list", "--json", env=env).stdout)
    row = next(r for r in listed if r["name"] == name)
    assert row["record"]["target"] == target and "calibrated on 12 frames" in row["description"]


@pytest.mark.process
def test_an_old_exporters_graph_is_calibrated_like_any_other(env, clip):
    """NanoDet-m's ONNX (IR 6) lists its weights among the graph's inputs; ONNX Runtime's calibrator then failed on
    its Resize ("Either `sizes` or `scales`") with an unexpected error. It converts and is judged."""
    proc = run_edge("models", "convert", "nanodet-m", "--to", "onnx-int8", "--calibrate", str(clip), "--frames", "12",
                    "--no-progress", env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((Path(env["EDGE_MODEL_CACHE"]) / "converted" / "nanodet-m-int8.onnx.json").read_text())
    assert record["table"]["agreement_per_class"]["person"] >= 0.7, record["table"]


@pytest.mark.process
def test_an_openvino_ir_is_quantised_by_nncf_as_it_is(env, clip):
    """A user of OpenVINO may have the IR alone (the shared one: `convert_model` of the ONNX, weights in float16).
    `--to openvino-int8` refused it ("onnx reads .onnx files"), though NNCF quantises an IR as it is; the result is
    refused again as int8, and the targets that start from ONNX still say so."""
    ir = MODELS / "openvino" / "yolox_nano.xml"
    proc = run_edge("models", "convert", str(ir), "--to", "openvino-int8", "--calibrate", str(clip), "--frames", "8",
                    "--no-progress", env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = Path(env["EDGE_MODEL_CACHE"]) / "converted" / "yolox_nano-openvino-int8.xml"
    int8 = int8_weights(made, "openvino")
    assert int8[: STEM_CONVS + 1] == [False] * STEM_CONVS + [True] and sum(int8) > len(int8) // 2, int8
    assert silu_left_whole(made)
    record = json.loads(Path(f"{made}.json").read_text())
    assert record["made_from"]["weights_sha256"] == sha256_of(ir.with_suffix(".bin"))
    assert record["table"]["agreement_per_class"]["person"] >= 0.7, record["table"]
    again = run_edge("models", "convert", str(made), "--to", "openvino-int8", "--calibrate", str(clip),
                     "--no-progress", env=env)  # fmt: skip
    assert_one_clear_error(again, "quantised already (", "FakeQuantize")
    onnx_only = run_edge("models", "convert", str(ir), "--to", "onnx-int8", "--calibrate", str(clip), env=env)
    assert_one_clear_error(onnx_only, "float ONNX model", "openvino-int8 from its IR")


@pytest.mark.process
def test_a_model_whose_batch_is_left_open_runs_on_openvino_and_converts(env, clip, tmp_path):
    """torch.onnx leaves the batch open with `dynamic_axes`: ONNX Runtime ran such a file, OpenVINO refused it
    ("unrecognised output layout ... [1, -1, 85]"), and its conversion ended in ONNX Runtime's "Incomplete symbolic
    shape inference" (rknn-toolkit2 asked for `input_size_list`). The batch is the pipeline's: one frame."""
    model = left_open(tmp_path / "batched.onnx", (0,))
    found = {}
    for engine in ("onnx", "openvino"):
        proc = run_edge("detect", str(MEDIA / "kite_and_cold.jpg"), "--model", str(model), "--backend", engine,
                        "--json", env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        found[engine] = sorted(d["label"] for d in json.loads(proc.stdout)["detections"])
    assert found["openvino"] == found["onnx"] and "kite" in found["onnx"], found
    proc = run_edge("models", "convert", str(model), "--to", "onnx-int8", "--calibrate", str(clip), "--frames", "8",
                    "--no-progress", env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((Path(env["EDGE_MODEL_CACHE"]) / "converted" / "batched-int8.onnx.json").read_text())
    assert record["table"]["agreement_per_class"]["person"] >= 0.7, record["table"]


@pytest.mark.process
def test_float_and_its_int8_side_by_side_live_and_in_bench(env, clip, tmp_path):
    """`--compare onnx,onnx@yolox-nano-int8`: the same frames through the float model and its conversion, the
    int8's agreement with the float one live; `edge bench --backends onnx,onnx@yolox-nano-int8` scores it too."""
    from tests.server import running_server

    assert convert(env, clip, "onnx-int8").returncode == 0
    bench = run_edge("bench", "-s", str(clip), "--models", "yolox-nano", "--backends", "onnx,onnx@yolox-nano-int8",
                     "--frames", "6", "--warmup", "1", "--out", str(tmp_path / "bench"), env=env)  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    rows = {r["backend"]: r for r in json.loads((tmp_path / "bench" / "bench.json").read_text())["pairs"]}
    assert rows["onnx"]["reference"] and rows["onnx@yolox-nano-int8"]["file"] == "yolox-nano-int8", rows
    assert rows["onnx@yolox-nano-int8"]["map50"] is not None
    # the table's columns hold such a name: it ran into the device column
    header, *lines = [line for line in bench.stdout.splitlines() if not line.startswith("#")]
    assert all(line.index("CPUExecutionProvider") == header.index("Device") for line in lines), bench.stdout
    args = ["--source", str(clip), "--loop", "--model", "yolox-nano", "--compare", "onnx,onnx@yolox-nano-int8"]
    with running_server(args, tmp_path / "edge.log", env=env) as edge:
        edge.wait_until("/health/live")
        deadline = time.monotonic() + 120
        while True:
            rows = {r["stream"]: r for r in edge.client.get("/api/v1/compare").json()[0]["backends"]}
            if rows.get("main-onnx-yolox-nano-int8", {}).get("agreement", {}).get("map50") is not None:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.5)
    assert (
        rows["main-onnx-yolox-nano-int8"]["model"] == "yolox-nano-int8"
        and rows["main-onnx-auto"]["model"] == "yolox-nano"
    )
    assert rows["main-onnx-yolox-nano-int8"]["agreement"]["map50"] > 0.5
