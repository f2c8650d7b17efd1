"""Credentials in URLs are masked wherever text leaves the program, and nothing else is touched."""

import contextlib
import logging

import httpx
import pytest
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from edge_inference.edge.secrets import (
    install_log_masking,
    is_secret_key,
    mask_in,
    mask_text,
    mask_url,
    password_encoding_advice,
)
from tests.conftest import VTEST
from tests.server import running_server
from tests.test_watchdogs import wait_for


def test_user_info_and_secret_query_keys_are_masked():
    assert mask_url("rtsp://admin:hunter2@10.0.0.5:554/live") == "rtsp://admin:***@10.0.0.5:554/live"
    assert mask_url("https://cam.example/stream?token=abc&res=hd") == "https://cam.example/stream?token=***&res=hd"
    # a password holding '@' is everything up to the last '@' of the authority
    assert mask_url("rtsp://admin:t@lk@host/") == "rtsp://admin:***@host/"
    assert mask_url("rtsp://admin:p%40ss%3Aw@host:554/a") == "rtsp://admin:***@host:554/a"
    assert mask_url("http://h/x?pw=1&keyframe=2&api_key=3&accessToken=4&X-Amz-Signature=5&width=640") == (
        "http://h/x?pw=***&keyframe=2&api_key=***&accessToken=***&X-Amz-Signature=***&width=640"
    )
    assert mask_url("http://h/x?pass=1&pwd=2&secret=3&auth=4&sig=5&password=6") == (
        "http://h/x?pass=***&pwd=***&secret=***&auth=***&sig=***&password=***"
    )
    # a user info without a password may be a camera's key (rtsp://KEY@host/): masked whole
    assert mask_url("http://user@host/a?b=c%20d&e") == "http://***@host/a?b=c%20d&e"
    for untouched in ("/dev/video0", "rtsp://cam/stream", "http://host/a?b=c%20d&e", "0"):
        assert mask_url(untouched) == untouched
    assert not is_secret_key("keyframe") and not is_secret_key("monkey") and is_secret_key("session_key")


def test_a_password_typed_with_a_character_that_ends_the_address_is_masked_whole():
    # '/', '?' and '#' end a URL's authority: a parser stops there, before the '@', and saw no password at all
    # "p@ss#word": an '@' before the '#' made the parser's user info "admin:p", and "ss#word" reached the log
    # "p@ss/word": the parser's host was "ss", so "ss/word" reached the log and the error named a host "ss"
    for password in ("p#ss", "p/ss", "p?ss", "/?#", "p#s@s", "p@ss#word", "p@ss?w", "p@ss/word", "p@s/s/w"):
        url = f"rtsp://admin:{password}@192.168.1.5:554/live?fps=5"
        assert mask_url(url) == "rtsp://admin:***@192.168.1.5:554/live?fps=5"
        assert mask_text(f"stream {url} stalled") == "stream rtsp://admin:***@192.168.1.5:554/live?fps=5 stalled"
        assert mask_in(f"401 for admin:{password}@192.168.1.5", url) == "401 for admin:***@192.168.1.5"
        assert password_encoding_advice(url).startswith("its password holds "), password  # and says how to write it
    # where nothing before the path is a password, an '@' in the path or after a port is left alone
    for untouched in ("rtsp://cam:8554/a@b", "rtsp://cam/a@b#x", "rtsp://[::1]:554/x@y"):
        assert mask_url(untouched) == untouched
    assert mask_url("rtsp://admin:pw@cam/live?mail=a@b.com") == "rtsp://admin:***@cam/live?mail=a@b.com"


def test_text_around_a_url_is_never_altered():
    url = "rtsp://admin:t@lk@host/stream"
    message = f"cannot open {url}: the stream timed out (try tcp transport)."
    masked = mask_in(message, url)
    assert masked == "cannot open rtsp://admin:***@host/stream: the stream timed out (try tcp transport)."
    # a library that echoes the user info without the scheme is caught too
    assert mask_in("auth failed for admin:t@lk@host", url) == "auth failed for admin:***@host"
    assert (
        mask_text("see http://x/?pw=zz. and (rtsp://a:b@c/d), ok") == "see http://x/?pw=***. and (rtsp://a:***@c/d), ok"
    )
    plain = "no URL here: width=640, token count 3, p@ss words"
    assert mask_text(plain) is plain


def test_every_log_record_is_masked(caplog):
    install_log_masking()
    install_log_masking()  # idempotent
    with caplog.at_level(logging.INFO):
        logging.getLogger("uvicorn.error").info("opening %s", "rtsp://admin:s3cr3t@cam/1?token=abc")
        try:
            raise RuntimeError("failed http://u:s3cr3t@h/")
        except RuntimeError:
            logging.getLogger("some.library").exception("boom")
    text = caplog.text
    assert "s3cr3t" not in text and "abc" not in text
    assert "rtsp://admin:***@cam/1?token=***" in text and "http://u:***@h/" in text


@pytest.mark.process
def test_the_api_token_never_reaches_the_log_at_any_level(tmp_path):
    """uvicorn logs every WebSocket's path with its query (`?token=`), right or wrong; at debug level headers and
    cookies pass through too. A camera key in the user info alone (`rtsp://KEY@host/`) is a secret as well."""
    token, wrong = "the-right-token-1234", "a-wrong-token-5678"
    camera = "rtsp://CAMKEY9876@127.0.0.1:9/stream"
    config = tmp_path / "streams.yaml"
    config.write_text(
        f"streams:\n  - id: main\n    source: {VTEST}\n    loop: true\n  - id: door\n    source: {camera}\n"
    )
    with running_server(["--config", str(config)], tmp_path / "log", token=token, log_level="debug") as server:
        server.wait_until("/health/ready")
        for candidate in (token, wrong):
            with (
                contextlib.suppress(InvalidStatus),
                connect(
                    f"ws://127.0.0.1:{server.port}/api/v1/streams/main/ws?token={candidate}", open_timeout=60
                ) as websocket,
            ):
                websocket.recv(timeout=60)
        cookie = {"Cookie": f"edge_token={token}", "Authorization": f"Bearer {wrong}"}
        assert httpx.get(f"{server.base}/api/v1/streams?token={token}", headers=cookie, timeout=30).status_code == 200
        # the cookie on a WebSocket's handshake: the websockets library dumps its headers unquoted at debug level
        with connect(
            f"ws://127.0.0.1:{server.port}/api/v1/streams/main/ws", open_timeout=60, additional_headers=cookie
        ) as websocket:
            websocket.recv(timeout=60)
        # the token as a subprotocol (a browser's WebSocket can set no other header): refused, and never in clear
        with contextlib.suppress(InvalidStatus, InvalidHandshake):
            connect(f"ws://127.0.0.1:{server.port}/api/v1/streams/main/ws", open_timeout=60,
                    subprotocols=[Subprotocol(token)]).close()  # fmt: skip
        # the dashboard's ?token= swapped for the cookie; DeepStack's api_key in a form, right and wrong
        assert httpx.get(f"{server.base}/?token={token}", timeout=30).status_code == 303
        for key in (token, wrong):
            httpx.post(f"{server.base}/v1/vision/custom/list", data={"api_key": key}, timeout=30)
        wait_for(lambda: "CAMKEY" in server.log or "door" in server.log, "the camera to be tried", timeout=60)
        log = server.log
    assert "WebSocket /api/v1/streams/main/ws?token=***" in log  # the line is there, the token is not
    for secret in (token, wrong, "CAMKEY9876"):
        assert secret not in log
