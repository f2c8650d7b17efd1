"""The web dashboard in a real headless Chromium (Debian's), against a real server."""

from __future__ import annotations

import os
import shutil

import pytest

from edge_inference.backends import engines
from tests.conftest import REPO, VTEST
from tests.server import running_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "test-artifacts"
# Without these, Chromium keeps trying to reach Google's services, which this network refuses.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the dashboard tests: apt-get install chromium")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield instance
        instance.close()


def _wait(page, script: str, timeout_s: float = 30.0):
    page.wait_for_function(script, timeout=timeout_s * 1000)


def test_dashboard_shows_video_detections_latency_and_backends(tmp_path, browser):
    args = ["--source", str(VTEST), "--model", "yolox-nano", "--loop"]
    with running_server(args, tmp_path / "log") as server:
        server.wait_until("/health/ready")
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.base + "/")
        panel = "document.querySelector('.panel[data-stream=\"main\"]')"
        _wait(page, f"{panel} && {panel}.querySelector('img.video').naturalWidth > 0")
        _wait(page, f"{panel}.querySelectorAll('.detections li').length > 0")
        first_frame = page.inner_text('.panel[data-stream="main"] .frame')
        draws = int(page.get_attribute('.panel[data-stream="main"] canvas.latency-chart', "data-points"))
        # the list and the chart keep updating
        _wait(page, f"document.querySelector('.panel[data-stream=\"main\"] .frame').textContent !== {first_frame!r}")
        _wait(page, f"Number({panel}.querySelector('canvas.latency-chart').dataset.points) > {draws}")
        assert "person" in page.inner_text('.panel[data-stream="main"] .detections')
        _wait(page, "document.querySelector('#ready').textContent === 'ok'")
        _wait(page, f"{panel}.querySelector('.state').textContent === 'running'")
        assert page.is_hidden('.panel[data-stream="main"] .error')
        _wait(page, "document.querySelector('.panel .figures').textContent.includes('fps')")
        _wait(page, f"document.querySelectorAll('#backends-table tbody tr').length === {len(engines())}")
        assert "openvino" in page.inner_text("#backends-table") and page.is_hidden("#compare")
        _wait(page, "document.querySelectorAll('#detectors-table tbody tr').length === 1")
        assert "main" in page.inner_text("#detectors-table tbody")  # the loaded engine and the stream it serves
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        page.close()
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 20_000


def test_compare_mode_shows_one_panel_per_backend(tmp_path, browser):
    args = ["--source", str(VTEST), "--model", "yolox-nano", "--compare", "onnx,tflite", "--loop"]
    with running_server(args, tmp_path / "log") as server:
        server.wait_until("/health/ready")
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(server.base + "/")
        _wait(page, "document.querySelectorAll('.panel').length === 2")
        streams = page.eval_on_selector_all(".panel", "nodes => nodes.map(n => n.dataset.stream)")
        assert streams == ["main-onnx", "main-tflite"]
        for stream in streams:
            _wait(page, f"document.querySelector('.panel[data-stream=\"{stream}\"] img.video').naturalWidth > 0")
        _wait(
            page,
            "!document.querySelector('#compare').hidden && "
            "document.querySelectorAll('#compare-table tbody tr').length === 2",
        )
        _wait(page, "document.querySelector('#compare-table tbody').textContent.includes('frames)')")
        table = page.inner_text("#compare-table")
        assert "reference" in table and "tflite" in table
        page.screenshot(path=str(ARTIFACTS / "dashboard-compare.png"), full_page=True)
        page.close()


def test_with_a_token_the_dashboard_signs_in_and_shows_a_dead_camera(tmp_path, browser):
    """Without the token: 401. With ?token=: a cookie, then video, SSE and WebSocket all work; a dead camera's
    state and error are shown on its panel in red, where a person looks."""
    token = "t0ken-for-the-browser-test"
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"streams:\n  - id: main\n    source: {VTEST}\n    loop: true\n  - id: porch\n    source: /dev/video9\n"
    )
    with running_server(["--config", str(config)], tmp_path / "log", token=token) as server:
        server.wait_until("/health/ready")
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        refused = page.goto(server.base + "/")
        assert refused.status == 401 and "needs its API token" in page.content()
        assert page.goto(server.base + "/api/v1/streams").status == 401
        page.goto(server.base + f"/?token={token}")
        assert "token=" not in page.url  # swapped for a cookie and taken out of the address bar
        main = "document.querySelector('.panel[data-stream=\"main\"]')"
        _wait(page, f"{main} && {main}.querySelector('img.video').naturalWidth > 0")  # MJPEG through the cookie
        _wait(page, f"{main}.querySelectorAll('.detections li').length > 0")  # SSE through the cookie
        message = page.evaluate(
            """() => new Promise((resolve, reject) => {
                const ws = new WebSocket(`ws://${location.host}/api/v1/streams/main/ws`);
                ws.onmessage = (e) => { resolve(JSON.parse(e.data).stream); ws.close(); };
                ws.onerror = () => reject("websocket refused");
            })"""
        )
        assert message == "main"
        assert "edge_token" not in page.evaluate("document.cookie")  # HttpOnly: no script can read it
        porch = "document.querySelector('.panel[data-stream=\"porch\"]')"
        _wait(page, f"{porch}.querySelector('.state').textContent === 'reconnecting'")
        _wait(page, f"{porch}.querySelector('.state').classList.contains('bad')")
        _wait(page, f"!{porch}.querySelector('.error').hidden")
        assert "camera /dev/video9 cannot be opened" in page.inner_text('.panel[data-stream="porch"] .error')
        _wait(page, "document.querySelector('#ready').textContent === 'degraded'")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-token-dead-camera.png"), full_page=True)
        context.close()


def test_dashboard_shows_events_with_snapshots_zone_counts_and_one_latency_scale(tmp_path, browser):
    from tests.test_events_api import events_config

    with running_server(["--config", events_config(tmp_path)], tmp_path / "log") as server:
        server.wait_until("/health/ready", timeout=180)
        page = browser.new_page(viewport={"width": 1600, "height": 1100})
        page.goto(server.base + "/")
        _wait(page, "document.querySelectorAll('#event-list .event img').length >= 2", 120)
        _wait(page, "[...document.querySelectorAll('#event-list .event img')].every((i) => i.naturalWidth > 0)")
        assert "person #" in page.inner_text("#event-list")
        counts = '.panel[data-stream="walkway"] .counts'
        _wait(page, f"document.querySelector('{counts}').textContent.includes('path: in')")
        assert "crossing:" in page.inner_text(counts)
        assert "zones=true" in page.get_attribute('.panel[data-stream="walkway"] img.video', "src")
        _wait(page, "document.querySelector('.detections').textContent.includes('#')")  # track ids listed
        # one panel on a wide window: the video takes the left, its figures the right, nothing left empty
        video = page.locator('.panel[data-stream="walkway"] img.video').bounding_box()
        chart = page.locator('.panel[data-stream="walkway"] canvas.latency-chart').bounding_box()
        assert chart["x"] > video["x"] + video["width"] - 1 and video["width"] > 700
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-events.png"), full_page=True)
        page.close()
    assert (ARTIFACTS / "dashboard-events.png").stat().st_size > 20_000
