from edge.secrets import mask_in, mask_url


def test_passwords_and_tokens_are_masked():
    assert mask_url("rtsp://admin:hunter2@10.0.0.5:554/live") == "rtsp://admin:***@10.0.0.5:554/live"
    assert mask_url("https://cam.example/stream?token=abc&res=hd") == "https://cam.example/stream?token=***&res=hd"
    assert mask_url("/dev/video0") == "/dev/video0"
    url = "rtsp://u:p4ss@host/x"
    assert "p4ss" not in mask_in(f"could not open {url} (p4ss rejected)", url)
