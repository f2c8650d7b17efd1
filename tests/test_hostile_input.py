"""What a hostile or careless client sends to the API: bombs, floods, oversized input. In-process route contracts."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time

import cv2
import numpy as np
import psutil
import pytest

from benchmarks.hostile import jpeg_claiming, png_bomb
from edge_inference.edge.stream.images import ImageError, ImageTooLargeError, decode_image, header_size
from tests.conftest import MEDIA, VTEST
from tests.inprocess import app_client, service_config, wait_ready


@pytest.fixture(scope="module")
def photo_jpeg() -> bytes:
    capture = cv2.VideoCapture(str(VTEST))
    ok, frame = capture.read()
    capture.release()
    assert ok
    return cv2.imencode(".jpg", frame)[1].tobytes()


def test_bombs_are_refused_from_their_header_before_any_decoding():
    for data, name in [(png_bomb(30000), "bomb.png"), (jpeg_claiming(60000, 60000), "bomb.jpg")]:
        rss = psutil.Process().memory_info().rss
        with pytest.raises(ImageTooLargeError, match="megapixel limit"):
            decode_image(data, name)
        assert psutil.Process().memory_info().rss - rss < 50 * 2**20  # decoding would take gigabytes
    # the limit is a setting: a real 768x576 frame passes a 0.5 MP limit, not a 0.4 MP one
    frame = cv2.imencode(".png", np.zeros((576, 768, 3), np.uint8))[1].tobytes()
    assert decode_image(frame, "frame.png", max_pixels=500_000).shape == (576, 768, 3)
    with pytest.raises(ImageTooLargeError, match="768x576"):
        decode_image(frame, "frame.png", max_pixels=400_000)


def _encodings(image: np.ndarray) -> dict[str, bytes]:
    """The same pixels in every format the service accepts and OpenCV writes, in their common variants."""
    options = {
        "jpeg": (".jpg", []),
        "progressive jpeg": (".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]),
        "png": (".png", []),
        "bmp": (".bmp", []),
        "lossy webp": (".webp", [cv2.IMWRITE_WEBP_QUALITY, 80]),
        "lossless webp": (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101]),
        "tiff": (".tiff", []),
        "uncompressed tiff": (".tiff", [cv2.IMWRITE_TIFF_COMPRESSION, 1]),
        "gif": (".gif", []),
        "avif": (".avif", []),
    }
    return {name: cv2.imencode(ext, image, params)[1].tobytes() for name, (ext, params) in options.items()}


def test_image_sizes_are_read_from_headers_as_the_decoder_reads_them():
    """The size check reads headers itself (no imaging library in the image): what it reads must be what OpenCV
    then decodes, for every accepted format, and any cut of a header is refused with the one message, never a crash."""
    rng = np.random.default_rng(7)
    images = [rng.integers(0, 255, (123, 457, 3), np.uint8), rng.integers(0, 255, (77, 91, 4), np.uint8)]
    files = {f"{name} {image.shape}": data for image in images for name, data in _encodings(image).items()}
    files |= {path.name: path.read_bytes() for path in MEDIA.glob("*.jpg")}
    assert len(files) >= 22
    for name, data in files.items():
        decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        assert header_size(data) == (decoded.shape[1], decoded.shape[0]), name
        for cut in (3, 11, 17, 25, 29):
            try:
                decode_image(data[:cut], name)
            except ImageError as refused:
                assert "readable" in str(refused) or "truncated" in str(refused), name
    for _ in range(300):  # random bytes behind each format's magic: refused or sized, nothing else
        for magic in (
            *(b"\xff\xd8", b"\x89PNG\r\n\x1a\n", b"BM", b"II*\0", b"MM\0+", b"RIFF\0\0\0\0WEBPVP8X", b"GIF89a"),
            b"\0\0\0\x20ftypavif\0\0\0\0avifmif1miaf",
        ):
            data = magic + rng.integers(0, 255, int(rng.integers(0, 64)), np.uint8).tobytes()
            with pytest.raises(ImageError):
                decode_image(data, "noise")


def _ffmpeg_made(tmp_path, name: str, *args: str) -> bytes:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args, str(tmp_path / name)], check=True, timeout=120)
    return (tmp_path / name).read_bytes()


@pytest.mark.process
def test_gif_and_avif_photos_run_and_heic_photos_and_videos_are_named_with_what_to_send(tmp_path):
    """GIF and AVIF, which OpenCV decodes here, were refused as "another format"; an iPhone's HEIC photo and a
    video sent as an image got the same words, which did not say what to do."""
    cat = str(MEDIA / "cat_720p.jpg")
    gif = _ffmpeg_made(tmp_path, "cat.gif", "-i", cat, "-frames:v", "1")
    # libaom at its real-time speed: its default took 8-16 s for this one picture
    avif = _ffmpeg_made(
        tmp_path, "cat.avif", "-i", cat, "-frames:v", "1", "-c:v", "libaom-av1", "-usage", "realtime", "-cpu-used", "8"
    )
    test_card = ("-f", "lavfi", "-i", "testsrc=size=320x240:rate=10", "-t", "1")
    video = _ffmpeg_made(tmp_path, "clip.mp4", *test_card)
    # a camcorder's MPEG-TS and a camera's raw H.264 (RTSP dump) have no 'ftyp' box: known by their first bytes
    camcorder = _ffmpeg_made(tmp_path, "clip.mts", *test_card, "-c:v", "libx264", "-f", "mpegts")
    rtsp_dump = _ffmpeg_made(tmp_path, "clip.h264", *test_card, "-c:v", "libx264", "-f", "h264")
    # ISO/IEC 23008-12: an 'ftyp' box with the HEVC image brands an iPhone writes, then its 'meta' box
    heic = b"\0\0\0\x18ftypheic\0\0\0\0mif1heic" + b"\0\0\x01\0meta" + bytes(252)
    # the AVIF's image extent ('ispe': version and flags, then width and height) made to claim 60000x60000
    at = avif.index(b"ispe") + 8
    avif_bomb = avif[:at] + (60000).to_bytes(4, "big") * 2 + avif[at + 8 :]
    gif_bomb = gif[:6] + (65000).to_bytes(2, "little") * 2 + gif[10:]
    with app_client(service_config()) as client:
        wait_ready(client)
        for name, data in (("cat.gif", gif), ("cat.avif", avif)):
            answer = client.post("/api/v1/detect", files={"image": (name, data)})
            assert answer.status_code == 200 and any(d["label"] == "cat" for d in answer.json()["detections"])
        for data, status, fragment in [
            (heic, 415, "IMG_0001.HEIC is a HEIC photo (an iPhone's default format), which OpenCV cannot decode"),
            (video, 415, "IMG_0001.HEIC is a video, and this takes one image"),
            (camcorder, 415, "IMG_0001.HEIC is a video, and this takes one image"),
            (rtsp_dump, 415, "IMG_0001.HEIC is a video, and this takes one image"),
            (avif_bomb, 413, "(60000x60000 claimed by its header)"),
            (gif_bomb, 413, "(65000x65000 claimed by its header)"),
            (gif[: len(gif) - 1], 415, "the image is truncated"),
        ]:
            answer = client.post("/api/v1/detect", files={"image": ("IMG_0001.HEIC", data)})
            assert answer.status_code == status and fragment in answer.json()["detail"], answer.text


def test_an_extended_webp_claiming_a_huge_canvas_is_refused_from_its_header():
    # VP8X (the WebP container's extended header): flags, then canvas width - 1 and height - 1 in 24 bits each
    vp8x = b"VP8X" + (10).to_bytes(4, "little") + bytes(4) + (39999).to_bytes(3, "little") * 2
    with pytest.raises(ImageTooLargeError, match="40000x40000"):
        decode_image(b"RIFF" + (4 + len(vp8x)).to_bytes(4, "little") + b"WEBP" + vp8x, "canvas.webp")


@pytest.mark.process
def test_a_bomb_with_a_damaged_chunk_is_refused_and_the_decoder_holds_a_limit_of_its_own():
    """A wrong CRC in an ancillary chunk makes Pillow give up on the header, and libpng only warns about it: the size
    is read from IHDR itself. Behind that check, OpenCV's own limit (set before cv2 is imported) refuses too."""
    bomb = png_bomb(30000, bad_crc=True)
    rss = psutil.Process().memory_info().rss
    with pytest.raises(ImageTooLargeError, match="30000x30000"):
        decode_image(bomb, "bomb.png")
    assert psutil.Process().memory_info().rss - rss < 50 * 2**20
    with pytest.raises(ImageError, match=r"not a readable image.*header cannot be read"):
        decode_image(b"BM" + bytes(20), "odd.bmp")  # a header nothing can read is refused, not handed on
    decoder_alone = (
        "import edge_inference, cv2, numpy, psutil, sys; from benchmarks.hostile import png_bomb; "
        "data = numpy.frombuffer(png_bomb(20000, bad_crc=True), numpy.uint8)\n"
        "try:\n    cv2.imdecode(data, cv2.IMREAD_COLOR); print('decoded')\n"
        "except cv2.error as exc:\n    print('refused', 'CV_IO_MAX_IMAGE_PIXELS' in str(exc))\n"
        "print(psutil.Process().memory_info().rss // 2**20)"
    )
    run = subprocess.run([sys.executable, "-c", decoder_alone], capture_output=True, text=True, check=True)
    verdict, rss_mib = run.stdout.splitlines()
    assert verdict == "refused True" and int(rss_mib) < 1000  # 400 MP would be 1.2 GB of pixels


def test_the_api_answers_bombs_and_bad_bodies_with_4xx_messages(photo_jpeg):
    with app_client(service_config({"max_upload_mb": 2})) as client:
        wait_ready(client)
        bomb = client.post("/api/v1/detect", content=png_bomb(30000), headers={"Content-Type": "image/png"})
        assert bomb.status_code == 413 and "megapixel limit" in bomb.json()["detail"]
        multipart = client.post("/api/v1/detect", files={"image": ("x.jpg", jpeg_claiming(65000, 65000))})
        assert multipart.status_code == 413 and "x.jpg" in multipart.json()["detail"]
        for body, status, fragment in [
            (b"", 400, "empty"),
            (photo_jpeg[: len(photo_jpeg) // 2], 415, "truncated"),
            (b"%PDF-1.7 a document, not an image", 415, "not a readable image"),
            (b"\0" * 2_500_000, 413, "2 MB limit"),
        ]:
            answer = client.post("/api/v1/detect", content=body)
            assert answer.status_code == status and fragment in answer.json()["detail"], answer.text
        no_file = client.post("/api/v1/detect", data={"field": "value"}, files={"x": ("", b"")})
        assert no_file.status_code in (400, 415) and "Traceback" not in no_file.text
        broken = client.post(
            "/api/v1/detect", content=b"--zz\r\nbroken", headers={"Content-Type": "multipart/form-data; boundary=zz"}
        )
        assert broken.status_code == 400 and "multipart" in broken.json()["detail"]
        # two files in one form (curl -F image=@a.jpg -F image=@b.jpg): one was answered, the other dropped unsaid
        two = client.post("/api/v1/detect", files=[("image", ("a.jpg", photo_jpeg)), ("image", ("b.jpg", photo_jpeg))])
        assert two.status_code == 400 and two.json()["detail"] == (
            "2 files in one request (a.jpg, b.jpg): send one image a request, each in its own POST"
        )
        good = client.post("/api/v1/detect", files={"image": ("frame.jpg", photo_jpeg)})
        assert good.status_code == 200 and any(d["label"] == "person" for d in good.json()["detections"])


def test_an_image_sent_as_text_is_read_and_what_cannot_be_is_named(photo_jpeg):
    """Base64 (Roboflow's `base64 photo.jpg | curl -d @- URL`), a browser canvas's data: URL and JSON holding one
    were answered "another format, or damaged", which sent client authors looking for a broken file."""
    text = base64.b64encode(photo_jpeg).decode()
    json_type = {"Content-Type": "application/json"}
    with app_client(service_config()) as client:
        wait_ready(client)
        expected = client.post("/api/v1/detect", content=photo_jpeg).json()["detections"]
        assert any(d["label"] == "person" for d in expected)
        for body, headers in [
            (base64.encodebytes(photo_jpeg), {}),  # as `base64` writes it, a line break every 76 characters
            (text.encode(), {"Content-Type": "application/x-www-form-urlencoded"}),  # curl -d @- sends it so
            (base64.urlsafe_b64encode(photo_jpeg), {}),
            (f"data:image/jpeg;base64,{text}".encode(), {"Content-Type": "text/plain"}),
            (json.dumps({"image": text}).encode(), json_type),
            (json.dumps({"image": f"data:image/jpeg;base64,{text}"}).encode(), json_type),
            (json.dumps({"image": {"type": "base64", "value": text}}).encode(), json_type),  # Roboflow inference's
        ]:
            answer = client.post("/api/v1/detect", content=body, headers=headers)
            assert answer.status_code == 200 and answer.json()["detections"] == expected, answer.text[:200]
        for body, headers, status, fragment in [
            (
                json.dumps({"image": {"type": "url", "value": "http://169.254.169.254/latest/"}}).encode(),
                json_type,
                415,
                "the service does not fetch images from URLs",
            ),
            (b'{"image": "https://example.com/cat.jpg"}', json_type, 415, "does not fetch images from URLs"),
            (photo_jpeg.replace(b"\n", b""), {"Content-Type": "application/x-www-form-urlencoded"}, 415, "(curl -d)"),
            (b'{"picture": "x"}', json_type, 400, "a JSON body takes one image, in base64 or as a data: URL"),
            (b"[" * 100_000, json_type, 400, "the JSON body cannot be read"),
            (b"data:image/jpeg,not-base64", {}, 400, "a data: URL must hold the image in base64"),
            (text[:-3].encode(), {}, 400, "looks like base64 text but does not decode"),
            (base64.b64encode(png_bomb(30000)), {}, 413, "megapixel limit"),
        ]:
            answer = client.post("/api/v1/detect", content=body, headers=headers)
            assert answer.status_code == status and fragment in answer.json()["detail"], answer.text[:300]
            assert "curl --data-binary @photo.jpg" in answer.json()["detail"] or status == 413
        # `curl --data-binary @photo.jpg` without -H declares form text too, but its bytes are whole: read as an image
        # (it was refused, telling the user to run the very command they ran)
        whole = client.post(
            "/api/v1/detect", content=photo_jpeg, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        assert whole.status_code == 200 and whole.json()["detections"] == expected, whole.text[:300]
        # Roboflow's hosted API takes the URL in the query with an empty body: "the file is empty" said nothing of it
        by_query = client.post("/api/v1/detect", params={"image": "https://example.com/cat.jpg"})
        assert by_query.status_code == 415 and "does not fetch images from URLs" in by_query.json()["detail"]


def _post_in_thread(client, data: bytes, results: list) -> threading.Thread:
    thread = threading.Thread(target=lambda: results.append(client.post("/api/v1/detect", content=data)))
    thread.start()
    return thread


def test_uploads_run_off_the_event_loop_and_a_full_queue_answers_503(photo_jpeg):
    config = service_config({"upload_workers": 1, "upload_queue": 1})
    with app_client(config) as client:
        wait_ready(client)
        lock = client.app.state.uploads.lock("main")
        gate = client.app.state.upload_gate
        results: list = []
        with lock:  # the stream's upload detector is busy: uploads wait in their worker thread
            first = _post_in_thread(client, photo_jpeg, results)
            deadline = time.monotonic() + 60
            while gate.active < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            # the event loop still answers while an upload is being worked on
            assert client.get("/api/v1/streams").status_code == 200
            second = _post_in_thread(client, photo_jpeg, results)
            while gate.waiting < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            refused = client.post("/api/v1/detect", content=photo_jpeg)
            assert refused.status_code == 503 and refused.headers["Retry-After"].isdigit()
            assert "busy" in refused.json()["detail"] and first.is_alive() and second.is_alive()
        first.join(60)
        second.join(60)
        metrics = client.get("/metrics").text  # operators see refusals, not only the client that got them
    assert [r.status_code for r in results] == [200, 200]  # nothing that was accepted is lost
    assert "edge_uploads_refused_total 1.0" in metrics


def test_error_messages_quote_bounded_input():
    with app_client(service_config()) as client:
        long_id = "x" * 60_000
        missing = client.get(f"/api/v1/streams/{long_id}/detections/latest")
        assert missing.status_code == 404 and len(missing.content) < 400 and "60000 characters" in missing.text
        invalid = client.get(f"/api/v1/streams/main/video.mjpg?fps={'9' * 60_000}")
        assert invalid.status_code == 422 and len(invalid.content) < 1000
        unknown_detect = client.post(f"/api/v1/detect?stream={long_id}", content=b"x")
        assert unknown_detect.status_code == 404 and len(unknown_detect.content) < 400


_READ_A_DAMAGED_VIDEO = """
import sys
from edge_inference.edge.stream.sources import SourceError, open_source
damaged, not_a_video = sys.argv[1:3]
source = open_source(damaged)
source.open()
frames = 0
while source.read() is not None:
    frames += 1
try:
    open_source(not_a_video).open()
except SourceError as exc:
    print(f"refused: {exc}")
print(f"frames {frames}")
"""


@pytest.mark.process
def test_a_damaged_video_does_not_write_ffmpegs_complaints_into_the_log(tmp_path):
    # vtest.avi cut in the middle of a frame, and an .mp4 that is text: FFmpeg inside OpenCV writes each damaged
    # block and each failed open to stderr itself, unbounded (a lossy camera fills a Pi's journal)
    damaged, not_a_video = tmp_path / "cut.avi", tmp_path / "notes.mp4"
    damaged.write_bytes(VTEST.read_bytes()[:3_000_000])
    not_a_video.write_text("not a video")

    def read_both(**env: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", _READ_A_DAMAGED_VIDEO, str(damaged), str(not_a_video)]
        inherited = {k: v for k, v in os.environ.items() if k != "OPENCV_FFMPEG_LOGLEVEL"}  # the child's own default
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**inherited, **env})

    quiet = read_both()
    assert quiet.returncode == 0, quiet.stderr
    assert "refused: video" in quiet.stdout
    assert int(quiet.stdout.split("frames ")[1]) > 100  # read up to the damage, then ended
    assert " @ 0x" not in quiet.stderr and "OPENCV:FFMPEG" not in quiet.stdout, quiet.stderr
    # FFmpeg's own words are there to be had: the user's setting wins
    told = read_both(OPENCV_FFMPEG_LOGLEVEL="16")
    assert "[OPENCV:FFMPEG:16] moov atom not found" in told.stdout and "error while decoding" in told.stdout


@pytest.mark.process
def test_probes_that_use_head_are_answered(tmp_path):
    """Some load balancers probe with HEAD: it was 405, which reads as a service that is down."""
    from tests.conftest import VTEST
    from tests.inprocess import SSD_ONNX
    from tests.server import running_server

    with running_server(["--source", str(VTEST), "-m", SSD_ONNX, "--loop"], tmp_path / "log") as server:
        server.wait_until("/health/ready")
        for path in ("/health/live", "/health/ready", "/api/v1/health/live", "/api/v1/health/ready"):
            answer = server.client.head(path)
            assert answer.status_code == 200 and answer.content == b"", (path, answer.status_code)
        log = server.log
    assert "Traceback" not in log


ONE_STREAM = f"streams:\n  - id: main\n    source: {VTEST}\n    model: {MEDIA.parent / 'models/onnx/nanodet_m.onnx'}\n"


def _laughs() -> str:
    """A "billion laughs": nine levels of ten aliases each, 10^9 values once expanded, under a key not starting
    with x- (so it is walked like any other value)."""
    levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for depth in range(1, 9):
        name, previous = chr(ord("a") + depth), chr(ord("a") + depth - 1)
        levels.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]")
    return "\n".join(levels) + "\nstreams: []\n"


@pytest.mark.process
@pytest.mark.parametrize(
    "case, text, env, expected",
    [
        ("aliases that never end", _laughs(), {}, "expands to more than 100000 values once its aliases"),
        ("20,000-deep brackets", "streams: " + "[" * 20_000 + "]" * 20_000 + "\n", {}, "nests deeper than 64"),
        ("a NUL in topic_prefix", 'mqtt:\n  url: mqtt://127.0.0.1:9\n  topic_prefix: "edge\\0x"\nstreams: []\n', {},
         "mqtt.topic_prefix: holds a NUL"),
        ("a token no header carries", ONE_STREAM, {"EDGE_TOKEN": "tökén-with-umlauts-1234"},
         "which no HTTP header can carry"),
        ("a token file that never ends", ONE_STREAM, {"EDGE_TOKEN_FILE": "/dev/zero"},
         "is longer than 4096 bytes"),
    ],
)  # fmt: skip
def test_every_input_is_bounded_and_refused_in_one_line(tmp_path, case, text, env, expected):
    """Each of these grew to gigabytes, ended in "unexpected RecursionError ... report it" or a MemoryError, or was
    taken and broke later (a broker dropping every connection, a token no client could send): one line at start."""
    config = tmp_path / "streams.yaml"
    config.write_text(text)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "edge_inference", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1, (case, proc.stderr[-2000:])
    assert expected in errors[0] and "Traceback" not in proc.stderr and "unexpected" not in errors[0], errors[0]
    assert time.monotonic() - started < 120  # refused, not worked through


@pytest.mark.process
def test_a_config_that_never_ends_is_refused_unread():
    proc = subprocess.run(
        [sys.executable, "-m", "edge_inference", "serve", "--config", "/dev/zero", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and "error: config /dev/zero is larger than 1024 KiB" in proc.stderr, proc.stderr
