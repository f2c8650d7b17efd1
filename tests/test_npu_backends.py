"""Hailo and Rockchip NPU engines up to the hardware boundary: discovery on fake device trees, the errors a user
without the runtime or the device meets, HailoRT's NMS output handed on in its documented layout. Where the runtime
and the device are present (a Raspberry Pi 5 with hailo-all, an RK3588 with rknn-toolkit-lite2), the same checks see
the real ones instead of the fakes."""

from __future__ import annotations

import cv2
import pytest

from edge_inference.backends import BackendError, BackendOptions, get_engine
from edge_inference.backends.hailo_backend import (
    NO_DEVICE as NO_HAILO,
)
from edge_inference.backends.hailo_backend import (
    explain_load_failure,
    version_mismatch,
)
from edge_inference.backends.hailo_backend import require_device as require_hailo
from edge_inference.backends.hardware import (
    hailo_driver_version,
    hailo_nodes,
    hailo_pci_devices,
    rknpu_driver_version,
    rknpu_nodes,
    rockchip_soc,
)
from edge_inference.backends.rknn_backend import core_mask
from edge_inference.backends.rknn_backend import require_device as require_rknpu
from tests import fake_devices
from tests.conftest import skimage_photo
from tests.helpers import run_edge

HAILO_RUNTIME = get_engine("hailo").probe().engine is not None
RKNN_RUNTIME = get_engine("rknn").probe().engine is not None


@pytest.fixture
def sysroot(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SYSROOT", str(tmp_path))
    return tmp_path


def test_hailo_discovery_on_a_raspberry_pi_5_tree(sysroot):
    assert hailo_pci_devices() == [] and hailo_nodes() == [] and hailo_driver_version() is None
    with pytest.raises(BackendError) as nothing:
        require_hailo()
    assert str(nothing.value) == NO_HAILO and "dtparam=pciex1" in NO_HAILO and "1e60:2864" in NO_HAILO
    fake_devices.hailo(sysroot, node=False)
    with pytest.raises(BackendError, match=r"hailo_pci driver is not loaded.*reboot"):
        require_hailo()  # on the bus, but no driver: a different fix
    fake_devices.hailo(sysroot)
    assert hailo_pci_devices() == ["Hailo-8/8L at 0000:01:00.0"]
    assert [p.name for p in hailo_nodes()] == ["hailo0"] and hailo_driver_version() == "4.20.0"
    status = get_engine("hailo").probe()
    assert status.devices == ["hailo:0  /dev/hailo0"]
    if not HAILO_RUNTIME:
        assert not status.available and "hailo_platform" in (status.problem or "")


@pytest.mark.process
@pytest.mark.skipif(HAILO_RUNTIME, reason="HailoRT is installed here: the missing-runtime message cannot happen")
def test_a_hef_without_hailort_says_how_to_install_it(sysroot, tmp_path):
    fake_devices.hailo(sysroot)
    model = tmp_path / "yolov8n.hef"
    model.write_bytes(b"\x01HEF")
    with pytest.raises(BackendError) as missing:
        get_engine("hailo").load(model, BackendOptions())
    assert "sudo apt install hailo-all" in str(missing.value) and "not on PyPI" in str(missing.value)
    assert get_engine("hailo").rank(model) is None  # auto never picks an engine that cannot run
    photo = tmp_path / "cat.png"
    cv2.imwrite(str(photo), skimage_photo("chelsea"))
    proc = run_edge("detect", str(photo), "--model", str(model), "--backend", "hailo")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(errors) == 1 and "hailo-all" in errors[0], proc.stderr


def test_hailo_refusals_in_words_a_user_can_act_on(tmp_path):
    hef = tmp_path / "yolov8n.hef"
    other_chip = explain_load_failure(
        "HailoRTStatusException: HEF format is not compatible with device. Device arch: HAILO8L, HEF arch: HAILO8", hef
    )
    assert "yolov8n.hef is compiled for HAILO8 and this device is a HAILO8L" in other_chip
    assert "hailo8l builds" in other_chip
    assert version_mismatch("4.20.0", "4.20.1") is None
    mismatch = version_mismatch("4.18.0", "4.20.0")
    assert mismatch and "driver is 4.18.0 but HailoRT is 4.20.0" in mismatch and "reboot" in mismatch
    assert explain_load_failure("boom", hef) == "HailoRT could not open yolov8n.hef: boom"


def test_rknpu_discovery_and_core_selection(sysroot):
    assert rockchip_soc() is None
    with pytest.raises(BackendError, match="not a Rockchip board with an NPU"):
        require_rknpu()
    fake_devices.rk3588(sysroot, driver=False)
    assert rockchip_soc() == "rk3588" and rknpu_nodes() == []
    with pytest.raises(BackendError, match="rk3588 board's kernel has no RKNPU driver"):
        require_rknpu()
    fake_devices.rk3588(sysroot)
    assert require_rknpu() == "rk3588" and rknpu_driver_version() == "v0.9.6"
    assert [core_mask(d, "rk3588") for d in ("auto", "0", "1", "2", "all", "npu:1")] == [
        "NPU_CORE_AUTO",
        "NPU_CORE_0",
        "NPU_CORE_1",
        "NPU_CORE_2",
        "NPU_CORE_0_1_2",
        "NPU_CORE_1",
    ]
    with pytest.raises(BackendError, match=r"rk3566 has 1 NPU core.*auto, 0$"):
        core_mask("2", "rk3566")
    assert core_mask("0", "rk3566") == "NPU_CORE_AUTO"  # the mask is documented for RK3576/RK3588 only
    assert core_mask("all", "rk3576") == "NPU_CORE_0_1"
    status = get_engine("rknn").probe()
    assert status.devices == ["rk3588 NPU, 3 core(s), driver v0.9.6"]
    if not RKNN_RUNTIME:
        assert not status.available and "rknn-toolkit-lite2" in (status.problem or "")


@pytest.mark.skipif(RKNN_RUNTIME, reason="rknn-toolkit-lite2 is installed here")
def test_an_rknn_model_without_the_runtime_says_how_to_install_it(sysroot, tmp_path):
    fake_devices.rk3588(sysroot)
    model = tmp_path / "yolov8n.rknn"
    model.write_bytes(b"RKNN")
    with pytest.raises(BackendError, match=r"pip install rknn-toolkit-lite2.*librknnrt\.so"):
        get_engine("rknn").load(model, BackendOptions())
    assert get_engine("rknn").rank(model) is None
