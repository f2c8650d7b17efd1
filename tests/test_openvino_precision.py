"""OpenVINO's precision on a CPU whose default is not f32 (AVX-512 BF16, AMX), measured once against f32 and
remembered (issue 83: the default bf16 cost 1.11x yolox-nano's CPU per frame and 1.52x a dense YOLOv8n's on an Intel
Xeon without AMX, so every OpenVINO figure depended on which float it ran)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_inference.backends import BackendOptions, open_backend
from edge_inference.backends import openvino_precision as precision
from tests.conftest import MODELS

IR = MODELS / "openvino/yolox_nano.xml"


@given(default=st.floats(1e-4, 1.0), f32=st.floats(1e-4, 1.0))
def test_f32_is_kept_only_where_it_takes_clearly_less_cpu(default, f32):
    choice = precision.decided((default, f32), "bf16")
    assert (choice["precision"] == "f32") == (f32 <= precision.CHEAPER * default)
    assert choice["default"] == "bf16" and choice["ratio"] == pytest.approx(default / f32, abs=1e-3)
    said = precision.said(choice)
    assert ("runs this model in f32" in said) == (choice["precision"] == "f32") and "bf16" in said


def _precision_of(backend) -> str:
    return str(backend.compiled.get_property("INFERENCE_PRECISION_HINT")).lower()


def _default_precision() -> str:
    import openvino as ov

    return str(ov.Core().compile_model(str(IR), "CPU").get_property("INFERENCE_PRECISION_HINT")).lower()


def test_the_choice_is_measured_once_per_cpu_and_model_then_read(tmp_path, monkeypatch):
    first = open_backend("openvino", IR, BackendOptions("CPU", threads=1, cache_dir=tmp_path))
    record = tmp_path / precision.RECORD
    default = _default_precision()
    if "f32" in default:  # nothing to choose: the CPU's default is f32 (no AVX-512 BF16, no AMX)
        assert not record.exists() and _precision_of(first) == default and not first.notes
        return
    (choice,) = json.loads(record.read_text()).values()
    assert choice["precision"] in ("f32", "default") and choice["ratio"] > 0
    assert ("f32" in _precision_of(first)) == (choice["precision"] == "f32")
    assert bool(first.notes) == (choice["precision"] == "f32")  # said where the engine's default was not kept

    def measured_again(*args):
        raise AssertionError("measured again: the record is read")

    monkeypatch.setattr("edge_inference.backends.openvino_backend.compare", measured_again)
    again = open_backend("openvino", IR, BackendOptions("CPU", threads=1, cache_dir=tmp_path))
    assert _precision_of(again) == _precision_of(first) and again.notes == first.notes
    for other in ({"threads": 2}, {"engine_options": {"precision": "bf16"}}):
        monkeypatch.setattr("edge_inference.backends.openvino_backend.compare", lambda *a: (1.0, 2.0))
        asked = open_backend("openvino", IR, BackendOptions("CPU", cache_dir=tmp_path, **other))  # type: ignore[arg-type]
        assert "f32" not in _precision_of(asked)  # another thread count measures anew; a precision asked is kept


def test_without_a_cache_folder_the_engines_default_stands_unmeasured(tmp_path, monkeypatch):
    """A library user's open with no cache: each load would measure again, so nothing is measured."""
    monkeypatch.setattr("edge_inference.backends.openvino_backend.compare", lambda *a: (2.0, 1.0))  # f32 if asked
    backend = open_backend("openvino", IR, BackendOptions("CPU", threads=1))
    assert _precision_of(backend) == _default_precision() and not backend.notes


def test_an_int8_model_is_not_timed_in_two_floats(tmp_path, monkeypatch):
    """Its convolutions run in int8 whatever the float: compiling a 640 model twice bought nothing (the suite's
    YOLOv8n int8 test took 45 s instead of 17 with it)."""

    def measured(*args):
        raise AssertionError("an int8 model was timed")

    monkeypatch.setattr("edge_inference.backends.openvino_backend.compare", measured)
    backend = open_backend("openvino", MODELS / "onnx/yolov8n_int8.onnx", BackendOptions("CPU", cache_dir=tmp_path))
    assert not (tmp_path / precision.RECORD).exists() and not backend.notes
