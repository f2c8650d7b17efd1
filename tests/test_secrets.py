"""Credentials in URLs are masked wherever text leaves the program, and nothing else is touched."""

import logging

from edge_inference.edge.secrets import install_log_masking, is_secret_key, mask_in, mask_text, mask_url


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
    for untouched in ("/dev/video0", "rtsp://cam/stream", "http://user@host/a?b=c%20d&e", "0"):
        assert mask_url(untouched) == untouched
    assert not is_secret_key("keyframe") and not is_secret_key("monkey") and is_secret_key("session_key")


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
