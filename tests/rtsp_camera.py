"""A real RTSP camera for the tests: GStreamer's RTSP server (Debian's gir1.2-gst-rtsp-server-1.0) playing a video
file at its own rate as H.264, on loopback. Run with Debian's python3, which has the GObject bindings:

    /usr/bin/python3 tests/rtsp_camera.py PORT VIDEO[:VIDEO...] [PATH] [USER:PASSWORD]

Each client gets its own pipeline from the file's start, so a reconnecting client is served again; with several
files, the Nth session plays the Nth (the last one thereafter): a camera whose settings changed between sessions.
With USER:PASSWORD (the password as the camera knows it, not URL-encoded) it asks for them (RTSP basic
authentication), as cameras do.
"""

from __future__ import annotations

import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def require_login(server: GstRtspServer.RTSPServer, factory: GstRtspServer.RTSPMediaFactory, login: str) -> None:
    user, _, password = login.partition(":")
    auth = GstRtspServer.RTSPAuth()
    token = GstRtspServer.RTSPToken()
    token.set_string("media.factory.role", "viewer")
    auth.add_basic(GstRtspServer.RTSPAuth.make_basic(user, password), token)
    server.set_auth(auth)
    permissions = GstRtspServer.RTSPPermissions()
    permissions.add_permission_for_role("viewer", "media.factory.access", True)
    permissions.add_permission_for_role("viewer", "media.factory.construct", True)
    factory.set_permissions(permissions)


class Playlist(GstRtspServer.RTSPMediaFactory):
    """One pipeline per session, from the next file of the list."""

    def __init__(self, videos: list[str]) -> None:
        super().__init__()
        self.videos, self.sessions = videos, 0

    def do_create_element(self, url: object) -> Gst.Element:
        video = self.videos[min(self.sessions, len(self.videos) - 1)]
        self.sessions += 1
        return Gst.parse_launch(
            f'filesrc location="{video}" ! decodebin ! videoconvert ! video/x-raw,format=I420 ! '
            "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=10 ! "
            "rtph264pay name=pay0 pt=96 config-interval=1"
        )


def main(port: str, video: str, path: str = "/cam", login: str = "") -> None:
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    factory = Playlist(video.split(":"))
    factory.set_shared(False)
    if login:
        require_login(server, factory, login)
    server.get_mount_points().add_factory(path, factory)
    if server.attach(None) == 0:
        sys.exit(f"cannot listen on 127.0.0.1:{port}")
    print(f"rtsp://127.0.0.1:{port}{path}", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main(*sys.argv[1:])
