"""Hostile inputs and misbehaving cameras on loopback, shared by the fault matrix (faults.py) and the tests."""

from __future__ import annotations

import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import cv2
import numpy as np


def png_bomb(side: int, bad_crc: bool = False) -> bytes:
    """A real, valid 1-bit PNG of side x side pixels: tiny on disk, side*side*3 bytes once decoded to BGR.
    `bad_crc`: with an ancillary tEXt chunk whose CRC is wrong (Pillow refuses the header, libpng only warns)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\0" * (1 + (side + 7) // 8)
    packer = zlib.compressobj(9)
    body = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    text = chunk(b"tEXt", b"Comment\0hello")
    if bad_crc:
        text = text[:-4] + bytes(4)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + text + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def jpeg_claiming(width: int, height: int) -> bytes:
    """A small JPEG whose frame header claims another size (a bomb needs no pixel data to be dangerous)."""
    data = bytearray(cv2.imencode(".jpg", np.zeros((48, 64, 3), np.uint8))[1].tobytes())
    sof = data.find(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


class StallingCamera(BaseHTTPRequestHandler):
    """An HTTP camera whose first answer stops mid-stream with the socket left open; later ones wait for `hold`."""

    video: Path
    hold: threading.Event
    requests = 0
    went_silent_at: float | None = None  # monotonic

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        cls = type(self)
        cls.requests += 1
        first = cls.requests == 1
        data = self.video.read_bytes()
        if not first:
            self.hold.wait(300)
        self.send_response(200)
        self.send_header("Content-Type", "video/x-msvideo")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            if first:
                self.wfile.write(data[:600_000])
                self.wfile.flush()
                cls.went_silent_at = time.monotonic()
                self.hold.wait(300)  # says nothing more, and keeps the connection open
            else:
                self.wfile.write(data)
        except OSError:
            pass  # the reader was abandoned and has gone


def serve_stalling_camera(video: Path) -> tuple[str, type[StallingCamera], ThreadingHTTPServer]:
    """(host:port, the handler class holding its state, the server to shut down); release with handler.hold.set()."""
    handler = type("Camera", (StallingCamera,), {"video": video, "hold": threading.Event(), "requests": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"127.0.0.1:{server.server_address[1]}", handler, server


class FlappingCamera(BaseHTTPRequestHandler):
    """An HTTP camera that sends the start of its video on every request, then goes silent with the socket open:
    each reopen succeeds and delivers a few frames, then stalls again."""

    video: Path
    stop: threading.Event
    requests = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        type(self).requests += 1
        data = self.video.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "video/x-msvideo")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data[:600_000])
            self.wfile.flush()
            self.stop.wait(300)
        except OSError:
            pass


def serve_flapping_camera(video: Path) -> tuple[str, type[FlappingCamera], ThreadingHTTPServer]:
    """(host:port, the handler class, the server); release with handler.stop.set() and server.shutdown()."""
    handler = type("Camera", (FlappingCamera,), {"video": video, "stop": threading.Event(), "requests": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"127.0.0.1:{server.server_address[1]}", handler, server
