"""The web dashboard in a real headless Chromium (Debian's), against a real server."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from edge_inference.backends import engines
from tests.conftest import MEDIA, REPO, VTEST
from tests.inprocess import SSD_ONNX
from tests.server import Server, running_server

pytestmark = pytest.mark.system

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
    """Until `script` is true; an element not drawn yet (a null in the expression) is waited for, not an error."""
    catch = "catch (error) { if (error instanceof TypeError) return false; throw error; }"
    guarded = f"() => {{ try {{ return ({script}); }} {catch} }}"
    page.wait_for_function(guarded, timeout=timeout_s * 1000)


def test_dashboard_shows_video_detections_latency_and_backends(tmp_path, browser):
    """One camera: its tile in the grid, and the camera in focus at once (video, chart, detections, figures)."""
    args = ["--source", str(VTEST), "--model", "yolox-nano", "--loop"]
    with running_server(args, tmp_path / "log") as server:
        server.wait_until("/health/ready")
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.base + "/")
        focus = "document.querySelector('#focus[data-stream=\"main\"]')"
        _wait(page, f"{focus} && {focus}.querySelector('img.video').naturalWidth > 0")
        _wait(page, f"!{focus}.querySelector('img.video').hidden")  # shown once its picture came
        _wait(page, f"{focus}.querySelectorAll('.detections li').length > 0")
        _wait(page, "document.querySelector('.tile[data-stream=\"main\"] img.thumb').naturalWidth > 0")
        first_frame = page.inner_text("#focus .frame")
        draws = int(page.get_attribute("#focus canvas.latency-chart", "data-points"))
        # the list and the chart keep updating
        _wait(page, f"document.querySelector('#focus .frame').textContent !== {first_frame!r}")
        _wait(page, f"Number({focus}.querySelector('canvas.latency-chart').dataset.points) > {draws}")
        assert "person" in page.inner_text("#focus .detections")
        assert "person" in page.inner_text('.tile[data-stream="main"] .detections')
        _wait(page, "document.querySelector('#ready').textContent === 'ok'")
        _wait(page, f"{focus}.querySelector('.state').textContent === 'running'")
        assert page.is_hidden("#focus .error")
        _wait(page, "document.querySelector('#focus .figures').textContent.includes('fps')")
        _wait(page, f"document.querySelectorAll('#backends-table tbody tr').length === {len(engines())}")
        assert "openvino" in page.inner_text("#backends-table") and page.is_hidden("#compare")
        _wait(page, "document.querySelectorAll('#detectors-table tbody tr').length === 1")
        assert "main" in page.inner_text("#detectors-table tbody")  # the loaded engine and the stream it serves
        page.check("#show-regions")  # the tiles or regions each frame ran as, drawn (Frigate's debug view)
        _wait(page, f"{focus}.querySelector('img.video').src.includes('regions=true')")
        _wait(page, f"{focus}.querySelector('img.video').naturalWidth > 0")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        page.close()
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 20_000


def test_compare_mode_shows_one_tile_per_backend(tmp_path, browser):
    args = ["--source", str(VTEST), "--model", "yolox-nano", "--compare", "onnx,tflite", "--loop"]
    with running_server(args, tmp_path / "log") as server:
        server.wait_until("/health/ready")
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.goto(server.base + "/")
        _wait(page, "document.querySelectorAll('.tile').length === 2")
        streams = page.eval_on_selector_all(".tile", "nodes => nodes.map(n => n.dataset.stream)")
        assert streams == ["main-onnx", "main-tflite"]
        for stream in streams:
            _wait(page, f"document.querySelector('.tile[data-stream=\"{stream}\"] img.thumb').naturalWidth > 0")
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
        main = "document.querySelector('.tile[data-stream=\"main\"]')"
        _wait(page, f"{main} && {main}.querySelector('img.thumb').naturalWidth > 0")  # the live channel, by cookie
        page.click('.tile[data-stream="main"]')  # the camera in focus: its MJPEG through the cookie too
        _wait(page, "document.querySelector('#focus[data-stream=\"main\"] img.video').naturalWidth > 0")
        _wait(page, "document.querySelectorAll('#focus .detections li').length > 0")
        message = page.evaluate(
            """() => new Promise((resolve, reject) => {
                const ws = new WebSocket(`ws://${location.host}/api/v1/streams/main/ws`);
                ws.onmessage = (e) => { resolve(JSON.parse(e.data).stream); ws.close(); };
                ws.onerror = () => reject("websocket refused");
            })"""
        )
        assert message == "main"
        assert "edge_token" not in page.evaluate("document.cookie")  # HttpOnly: no script can read it
        porch = "document.querySelector('.tile[data-stream=\"porch\"]')"
        _wait(page, f"{porch}.querySelector('.state').textContent === 'reconnecting'")
        _wait(page, f"{porch}.querySelector('.state').classList.contains('bad')")
        _wait(page, f"!{porch}.querySelector('.error').hidden")
        assert "camera /dev/video9 cannot be opened" in page.inner_text('.tile[data-stream="porch"] .error')
        page.click('.tile[data-stream="porch"]')  # in focus: its error, and no broken-image icon under it
        _wait(page, "!document.querySelector('#focus[data-stream=\"porch\"] .error').hidden")
        time.sleep(3)  # past a retry of its video
        assert page.is_hidden("#focus img.video")
        _wait(page, "document.querySelector('#ready').textContent === 'degraded'")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-token-dead-camera.png"), full_page=True)
        context.close()


def test_the_dashboard_works_behind_a_reverse_proxy_at_a_sub_path(tmp_path, browser):
    """nginx serving the service at https://home/edge/, as users put it beside other services: every address in the
    page was absolute (/static, /api/v1), so the page came without its script and style, signing in with ?token=
    sent the browser to the proxy's own root, and the API page asked for /openapi.json there."""
    from tests.nginx import nginx_in_front

    token = "t0ken-behind-the-proxy"
    with running_server(["--source", str(VTEST), "--loop"], tmp_path / "log", token=token) as server:
        server.wait_until("/health/ready")
        with nginx_in_front(tmp_path / "nginx", server.base) as proxied:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})
            page = context.new_page()
            page.goto(proxied + f"?token={token}")
            assert page.url == proxied  # signed in, and still under the proxy's sub-path
            assert page.evaluate("getComputedStyle(document.querySelector('header')).display") == "flex"  # styled
            _wait(page, "document.querySelector('#connection').textContent === 'live'")
            focus = "document.querySelector('#focus[data-stream=\"main\"]')"
            _wait(page, f"{focus} && {focus}.querySelector('img.video').naturalWidth > 0", 60)  # MJPEG via nginx
            _wait(page, f"{focus}.querySelectorAll('.detections li').length > 0")
            _wait(page, "document.querySelector('.tile[data-stream=\"main\"] img.thumb').naturalWidth > 0")
            _wait(page, "document.querySelector('#ready').textContent === 'ok'")
            page.click("nav a >> text=API")  # the API page builds its addresses from X-Forwarded-Prefix
            assert page.url == proxied + "docs"
            _wait(page, "document.querySelector('.swagger-ui .info .title').textContent.includes('edge-inference')")
            _wait(page, "document.querySelectorAll('.opblock').length > 10")  # the document came through the proxy
            context.close()
            # the WebSocket route, upgraded by nginx as the README's block says (Upgrade and Connection passed on)
            address = proxied.replace("http://", "ws://") + "api/v1/streams/main/ws"
            with connect(address, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=30) as ws:
                frames = [json.loads(ws.recv(timeout=60))["frame"] for _ in range(3)]
            assert frames == sorted(frames) and len(set(frames)) == 3


def test_dashboard_shows_events_with_snapshots_zone_counts_and_one_latency_scale(tmp_path, browser):
    from tests.test_events_api import events_config

    with running_server(["--config", events_config(tmp_path)], tmp_path / "log") as server:
        server.wait_until("/health/ready", timeout=180)
        page = browser.new_page(viewport={"width": 1600, "height": 1100})
        page.goto(server.base + "/")
        _wait(page, "document.querySelectorAll('#event-list .event img').length >= 2", 120)
        _wait(page, "[...document.querySelectorAll('#event-list .event img')].every((i) => i.naturalWidth > 0)")
        assert "person #" in page.inner_text("#event-list")
        assert page.text_content("#events-note").startswith("of walkway")  # the camera in focus: its own events
        counts = '#focus[data-stream="walkway"] .counts'
        _wait(page, f"document.querySelector('{counts}').textContent.includes('path: in')")
        assert "crossing:" in page.inner_text(counts)
        assert "zones=true" in page.get_attribute("#focus img.video", "src")
        _wait(page, "document.querySelector('#focus .detections').textContent.includes('#')")  # track ids listed
        # the camera in focus on a wide window: the video takes the left, its figures the right, nothing left empty
        video = page.locator("#focus img.video").bounding_box()
        chart = page.locator("#focus canvas.latency-chart").bounding_box()
        assert chart["x"] > video["x"] + video["width"] - 1 and video["width"] > 700
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-events.png"), full_page=True)
        page.close()
    assert (ARTIFACTS / "dashboard-events.png").stat().st_size > 20_000


class Connections:
    """Requests the browser has open to the service, from its own network log (CDP). Chromium marks a multipart
    (MJPEG) image finished after its first part and goes on receiving on the same connection, so a stream is a
    request that is unfinished, or still receiving, after a settling time."""

    def __init__(self, page, base: str) -> None:
        self.base, self.urls, self.failed = base, [], []
        self.started: dict[str, tuple[str, float]] = {}  # request -> (url, when)
        self.finished: set[str] = set()
        self.received: dict[str, float] = {}  # request -> when data last arrived
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.on("Network.requestWillBeSent", self._sent)
        self.cdp.on("Network.webSocketCreated", lambda e: self.started.setdefault(e["requestId"], (e["url"], _now())))
        self.cdp.on("Network.webSocketClosed", lambda e: self.finished.add(e["requestId"]))
        self.cdp.on("Network.loadingFinished", lambda e: self.finished.add(e["requestId"]))
        self.cdp.on("Network.loadingFailed", self._failed)
        self.cdp.on("Network.dataReceived", lambda e: self.received.__setitem__(e["requestId"], _now()))
        self.cdp.on("Network.responseReceived", self._answered)
        self.cdp.send("Network.enable")

    def _sent(self, event) -> None:
        url = event["request"]["url"]
        if url.startswith(self.base):
            self.started[event["requestId"]] = (url, _now())
            self.urls.append(url)

    def _failed(self, event) -> None:
        self.finished.add(event["requestId"])
        self.received.pop(event["requestId"], None)

    def _answered(self, event) -> None:
        if event["response"]["url"].startswith(self.base) and event["response"]["status"] >= 400:
            self.failed.append((event["response"]["status"], event["response"]["url"]))

    def offline(self, offline: bool) -> None:
        conditions = {"offline": offline, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        self.cdp.send("Network.emulateNetworkConditions", conditions)

    def long_lived(self, page, settle_s: float = 4.0) -> list[str]:
        """Requests started before a `settle_s` window that are unfinished at its end, or received data in its second
        half: the page's streams (its short requests take milliseconds)."""
        window = _now()
        page.wait_for_timeout(settle_s * 500)
        half = _now()
        page.wait_for_timeout(settle_s * 500)
        return sorted(
            url
            for request, (url, when) in self.started.items()
            if when < window and (request not in self.finished or self.received.get(request, 0.0) > half)
        )


def _now() -> float:
    return time.monotonic()


def grid_config(tmp_path, cameras: int) -> str:
    """Cameras of the pedestrian video and of the photos, on one shared small model, paced low."""
    photos = sorted(p for p in MEDIA.glob("*.jpg"))
    lines = ["streams:"]
    for i in range(cameras):
        source = (
            f"{VTEST}\n    loop: true" if i % 2 == 0 else f"{photos[i // 2 % len(photos)]}\n    loop: true\n    fps: 2"
        )
        lines.append(f"  - id: cam{i + 1}\n    source: {source}\n    model: {SSD_ONNX}\n    backend: onnx")
    path = tmp_path / "grid.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("cameras", [1, 8])  # 3 cameras: the lost-connection test below
def test_the_camera_grid_shows_every_camera_on_two_connections(tmp_path, browser, cameras):
    """Every tile gets a state, a picture and a moving frame counter; /api/v1/stats is answered from the page; the
    browser holds at most two long-lived connections (the live channel, and the camera in focus) however many
    cameras there are; nothing is probed that is not configured."""
    with running_server(["--config", grid_config(tmp_path, cameras)], tmp_path / "log") as server:
        server.wait_until("/health/ready", timeout=180)
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        network = Connections(page, server.base)
        page.goto(server.base + "/")
        _wait(page, f"document.querySelectorAll('.tile').length === {cameras}")
        ids = [f"cam{i + 1}" for i in range(cameras)]
        frames = {}
        for stream in ids:
            tile = f"document.querySelector('.tile[data-stream=\"{stream}\"]')"
            _wait(page, f"{tile}.querySelector('img.thumb').naturalWidth > 0", 120)
            _wait(page, f"{tile}.querySelector('.frame').textContent.startsWith('frame ')", 120)
            _wait(page, f"['running', 'ended'].includes({tile}.querySelector('.state').textContent)", 120)
            frames[stream] = page.inner_text(f'.tile[data-stream="{stream}"] .frame')
        for stream in ids:  # every counter moves (the photos are shown twice a second, the video at its own rate)
            _wait(page, f"document.querySelector('.tile[data-stream=\"{stream}\"] .frame').textContent "
                        f"!== {frames[stream]!r}", 120)  # fmt: skip
            _wait(page, f"document.querySelector('.tile[data-stream=\"{stream}\"] .figures')"
                        ".textContent.includes('fps')", 60)  # from /api/v1/stats, polled every 2 s  # fmt: skip
        assert any(url.startswith(server.base + "/api/v1/stats") for url in network.urls)
        streaming = network.long_lived(page)
        assert len(streaming) <= 2, streaming
        assert any("/api/v1/live" in url for url in streaming)
        if cameras > 1:  # a camera put in focus: its full-rate video, the grid still on the same channel
            page.click('.tile[data-stream="cam2"]')
            _wait(page, "document.querySelector('#focus[data-stream=\"cam2\"] img.video').naturalWidth > 0", 60)
            _wait(page, "document.querySelectorAll('#focus .detections li').length > 0", 60)
            streaming = network.long_lived(page)
            assert len(streaming) <= 2 and any("/streams/cam2/video.mjpg" in url for url in streaming), streaming
            page.click("#back")
            _wait(page, "document.querySelector('#focus').hidden")
            assert len(network.long_lived(page)) <= 1  # the focused video was closed with the view
        assert not any("/api/v1/events" in url or "/api/v1/compare" in url for url in network.urls)
        assert network.failed == []  # no 404 from a probe in the console
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-grid-{cameras}.png"), full_page=True)
        page.close()


def test_the_page_shows_a_lost_connection_and_comes_back(tmp_path, browser):
    """The service restarts under an open page: the page says the connection is lost, then picks the cameras up
    again by itself once the service is back."""
    config = grid_config(tmp_path, 3)
    first = Server(["--config", config], tmp_path / "log-1")
    second = None
    try:
        first.wait_until("/health/ready", timeout=180)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(first.base + "/")
        _wait(page, "document.querySelector('#connection').textContent === 'live'", 60)
        _wait(page, "document.querySelector('.tile[data-stream=\"cam1\"] .frame').textContent !== ''", 60)
        first.stop()
        _wait(page, "document.querySelector('#connection').textContent.startsWith('connection lost')", 60)
        assert "bad" in page.get_attribute("#connection", "class")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-connection-lost.png"))
        frame = page.inner_text('.tile[data-stream="cam1"] .frame')
        second = Server(["--config", config], tmp_path / "log-2", port=first.port)
        second.wait_until("/health/ready", timeout=180)
        _wait(page, "document.querySelector('#connection').textContent === 'live'", 90)
        _wait(page, f"document.querySelector('.tile[data-stream=\"cam1\"] .frame').textContent !== {frame!r}", 90)
        page.close()
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_events_that_ended_while_the_page_was_cut_off_are_shown_ended(tmp_path, browser):
    """The service restarts under an open page: the events going on when it stopped ended then, while the page had no
    connection. The page said "going on" until some later change happened to refresh its list; on a camera where
    nothing else happens, for good. It now asks again once its connection is back."""
    from tests.test_events_api import events_config

    config = events_config(tmp_path)
    first = Server(["--config", config], tmp_path / "log-1")
    second = None
    going_on = "[...document.querySelectorAll('#event-list .event')].some((e) => e.textContent.includes('going on'))"
    try:
        first.wait_until("/health/ready", timeout=180)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(first.base + "/")
        _wait(page, going_on, 180)
        first.stop()  # the events going on end as it stops
        _wait(page, "document.querySelector('#connection').textContent.startsWith('connection lost')", 60)
        quiet = tmp_path / "quiet.yaml"  # the same camera and data folder, now showing nobody: no change will come
        quiet.write_text(Path(config).read_text().replace(str(VTEST), str(MEDIA / "cat_720p.jpg")))
        second = Server(["--config", str(quiet)], tmp_path / "log-2", port=first.port)
        second.wait_until("/health/ready", timeout=180)
        _wait(page, "document.querySelector('#connection').textContent === 'live'", 90)
        _wait(page, f"!({going_on})", 60)
        assert " s · best" in page.inner_text("#event-list")  # ended: each shows how long it lasted
        page.close()
    finally:
        first.stop()
        if second is not None:
            second.stop()
