"""Access control: the token, the cookie a browser gets for it, the Host header, cross-site Origins, CORS."""

from __future__ import annotations

import pytest
from starlette.websockets import WebSocketDisconnect

from edge_inference.edge.config import ServerConfig
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings
from edge_inference.service.access import AccessPolicy
from tests.inprocess import app_client, service_config

TOKEN = "s3cret-token-for-tests"
WS = "/api/v1/streams/main/ws"


def test_without_the_token_every_route_but_live_is_401():
    with app_client(service_config({"token": TOKEN})) as client:
        assert client.get("/health/live").status_code == 200
        for path in ("/api/v1/streams", "/health/ready", "/metrics", "/api/v1/stats", "/docs", "/static/app.js"):
            answer = client.get(path)
            assert answer.status_code == 401, path
            assert answer.headers["www-authenticate"].startswith("Bearer")
        assert "needs its API token" in client.get("/").text  # a page for a person, not JSON
        assert client.get("/api/v1/streams", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/api/v1/streams", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get(f"/api/v1/streams?token={TOKEN}").status_code == 200  # <img>, EventSource, VLC
        with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect(f"ws://localhost{WS}"):
            pass  # closed before it is accepted: a real server answers the handshake with 403
        assert refused.value.code == 1008
        with client.websocket_connect(f"ws://localhost/api/v1/streams/main/ws?token={TOKEN}") as ws:
            assert '"stream": "main"' in ws.receive_text()


def test_the_dashboard_swaps_the_token_for_an_httponly_cookie():
    with app_client(service_config({"token": TOKEN})) as client:
        answer = client.get(f"/?token={TOKEN}", follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "./"  # relative: a proxy's sub-path stays
        cookie = answer.headers["set-cookie"]
        assert f"edge_token={TOKEN}" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert client.get("/api/v1/streams").status_code == 200  # the client keeps the cookie, as a browser does
        assert client.get("/").status_code == 200
        assert client.get("/?token=wrong", follow_redirects=False).status_code == 200  # the cookie still holds


def test_metrics_can_be_left_open_for_a_scraper():
    with app_client(service_config({"token": TOKEN, "metrics_public": True})) as client:
        assert client.get("/metrics").status_code == 200
        assert client.get("/api/v1/streams").status_code == 401


def test_foreign_hosts_and_cross_site_requests_are_refused():
    with app_client(service_config()) as client:  # no token: loopback only, as by default
        assert client.get("/api/v1/streams", headers={"Host": "evil.example"}).status_code == 400  # DNS rebinding
        assert client.get("/api/v1/streams", headers={"Host": "127.0.0.1:8080"}).status_code == 200
        evil = {"Origin": "http://evil.example"}
        # a page elsewhere can neither post to /detect (a cross-site form) nor open the WebSocket
        assert client.post("/api/v1/detect", content=b"x", headers=evil).status_code == 403
        with (
            pytest.raises(WebSocketDisconnect) as refused,
            client.websocket_connect("ws://localhost/api/v1/streams/main/ws", headers=evil),
        ):
            pass
        assert refused.value.code == 1008
        same = client.post("/api/v1/detect", content=b"", headers={"Origin": "http://localhost"})
        assert same.status_code == 400  # allowed through; refused only for its empty body
        plain = client.get("/api/v1/streams", headers=evil)
        assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers  # CORS off


def test_cors_when_configured():
    with app_client(service_config({"cors_origins": ["http://grafana.lan"]})) as client:
        answer = client.get("/api/v1/streams", headers={"Origin": "http://grafana.lan"})
        assert answer.headers["access-control-allow-origin"] == "http://grafana.lan"
        assert client.post("/api/v1/detect", content=b"", headers={"Origin": "http://grafana.lan"}).status_code == 400


def test_where_the_token_comes_from_and_when_one_is_made(tmp_path):
    settings = Settings(token=None, token_file=None)
    loopback = AccessPolicy.from_config(ServerConfig(), settings)
    assert loopback.token is None and "localhost" in loopback.allowed_hosts and "*" not in loopback.allowed_hosts
    open_lan = AccessPolicy.from_config(ServerConfig(host="0.0.0.0"), settings)
    assert open_lan.generated and len(open_lan.token or "") >= 32 and open_lan.allowed_hosts == ("*",)
    assert AccessPolicy.from_config(ServerConfig(host="0.0.0.0", allow_no_token=True), settings).token is None
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    assert AccessPolicy.from_config(ServerConfig(token_file=token_file), settings).token == "from-a-file"
    token_file.write_bytes(b"\xef\xbb\xbffrom-a-file\r\n")  # Notepad's UTF-8: the mark made every client's token wrong
    assert AccessPolicy.from_config(ServerConfig(token_file=token_file), settings).token == "from-a-file"
    assert AccessPolicy.from_config(ServerConfig(), Settings(token="from-env")).token == "from-env"
    assert AccessPolicy.from_config(ServerConfig(token="config-wins"), Settings(token="env")).token == "config-wins"
    with pytest.raises(EdgeError, match="there is no token file"):
        AccessPolicy.from_config(ServerConfig(token_file=tmp_path / "missing"), settings)
    assert TOKEN not in repr(AccessPolicy(token=TOKEN))  # never in a log line by accident


def test_a_token_from_any_place_is_held_to_the_same_length_and_loses_the_spaces_a_header_would(tmp_path):
    """EDGE_TOKEN=abc and a 3-character token file were taken as they were, where the config's token must have 8
    characters; a token with a space at its end (a .env line, a YAML value in quotes) never matched, because an
    HTTP header's value loses its spaces on the way."""
    settings = Settings(token=None, token_file=None)
    short_file = tmp_path / "token"
    short_file.write_text("abc\n")
    for server, env, source in [
        (ServerConfig(), Settings(token="abc"), "EDGE_TOKEN"),
        (ServerConfig(token_file=short_file), settings, f"the token file {short_file}"),
        (ServerConfig(), Settings(token_file=short_file), f"the token file {short_file} (EDGE_TOKEN_FILE)"),
        (ServerConfig(token="    abc     "), settings, "server.token"),
    ]:
        with pytest.raises(EdgeError) as refused:
            AccessPolicy.from_config(server, env)
        assert str(refused.value).startswith(f"the token from {source} has 3 characters; give one of at least 8")
    spaced = service_config({"token": f" {TOKEN} "})
    with app_client(spaced, {"Authorization": f"Bearer {TOKEN} "}) as client:  # sent with the space, as written
        assert client.get("/api/v1/streams").status_code == 200


def test_quotes_around_an_environment_value_are_not_part_of_it(monkeypatch, tmp_path):
    """Compose's list form (`environment: [EDGE_TOKEN="..."]`) and `docker run --env-file` keep the quotes: the token
    was read with them (every client's token "wrong"), `EDGE_PORT="8080"` was "Input should be a valid integer",
    `EDGE_DATA_DIR="/data"` made a folder named `"`, and a camera password from `${PORCH_PASSWORD}` failed at the
    camera. The quotes are now taken off; `EDGE_TOKEN=""` is no token, as `EDGE_TOKEN=` is."""
    from edge_inference.edge.config.env import filled_from_environment
    from edge_inference.edge.settings import get_settings

    monkeypatch.setenv("EDGE_TOKEN", f'"{TOKEN}"')
    monkeypatch.setenv("EDGE_PORT", '"8401"')
    monkeypatch.setenv("EDGE_DATA_DIR", f"'{tmp_path}/data'")
    monkeypatch.setenv("EDGE_MQTT_URL", '"mqtt://broker.lan:1883"')
    settings = get_settings()
    assert AccessPolicy.from_config(ServerConfig(), settings).token == TOKEN
    assert settings.port == 8401 and settings.data_dir == tmp_path / "data"
    assert settings.mqtt_url is not None and settings.mqtt_url.get_secret_value() == "mqtt://broker.lan:1883"
    monkeypatch.setenv("EDGE_TOKEN", '""')
    assert get_settings().token is None
    monkeypatch.setenv("EDGE_TOKEN", 'a"b"')  # quotes inside a value are its own
    assert get_settings().token.get_secret_value() == 'a"b"'  # type: ignore[union-attr]
    config = {"source": "rtsp://admin:${PORCH_PASSWORD}@cam/s1"}
    assert filled_from_environment(config, {"PORCH_PASSWORD": '"pa ss"'}) == {"source": "rtsp://admin:pa ss@cam/s1"}


@pytest.mark.process
def test_listening_on_every_address_prints_addresses_another_machine_can_open(tmp_path):
    """`--host 0.0.0.0` printed `http://0.0.0.0:PORT/?token=...`, which no other machine can open. The start-up
    lines name this machine's own addresses instead (each one a socket here can bind: an address of this machine,
    neither the wildcard nor loopback)."""
    import re
    import socket

    from tests.conftest import VTEST
    from tests.inprocess import SSD_ONNX
    from tests.server import running_server

    args = ["--source", str(VTEST), "-m", SSD_ONNX, "-b", "onnx", "--host", "0.0.0.0"]
    with running_server(args, tmp_path / "serve.log") as server:
        server.wait_until("/health/live")
        log = server.log
    first = re.search(r"edge: serving on http://(\S+):(\d+) ", log)
    assert first is not None, log
    also = re.search(r"also at (.*)", log)
    hosts = [first.group(1)] + (re.findall(r"http://([^,\s]+):\d+", also.group(1)) if also else [])
    assert "0.0.0.0" not in log.split("Uvicorn running")[0], log
    assert re.search(r"dashboard http://(\S+):\d+/\?token=", log), log
    for host in hosts:
        if host == "localhost":  # a machine with no network yet
            continue
        address = host.strip("[]")
        assert not address.startswith("127.") and address != "::1", hosts
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family) as probe:
            probe.bind((address, 0))  # one of this machine's own addresses
