"""A real RTSP camera for the tests: GStreamer's RTSP server (Debian's gir1.2-gst-rtsp-server-1.0) playing a video
file at its own rate as H.264, on loopback. Run with Debian's python3, which has the GObject bindings:

    /usr/bin/python3 tests/rtsp_camera.py PORT VIDEO [PATH]

Each client gets its own pipeline from the file's start, so a reconnecting client is served again.
"""

from __future__ import annotations

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main(port: str, video: str, path: str = "/cam") -> None:
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(
        f'( filesrc location="{video}" ! decodebin ! videoconvert ! video/x-raw,format=I420 ! '
        "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=10 ! "
        "rtph264pay name=pay0 pt=96 config-interval=1 )"
    )
    factory.set_shared(False)
    server.get_mount_points().add_factory(path, factory)
    if server.attach(None) == 0:
        sys.exit(f"cannot listen on 127.0.0.1:{port}")
    print(f"rtsp://127.0.0.1:{port}{path}", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main(*sys.argv[1:])
