"""The app in-process (Starlette's TestClient runs its lifespan), for route contracts that need no real socket."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from starlette.testclient import TestClient

from edge_inference.edge.config import ServiceConfig
from edge_inference.service.app import create_app
from tests.conftest import MODELS, VTEST

SSD_ONNX = str(MODELS / "onnx/ssd_mobilenet_v2_coco_quant_postprocess.onnx")


def service_config(server: dict[str, Any] | None = None, **stream: Any) -> ServiceConfig:
    streams = [{"id": "main", "source": str(VTEST), "model": SSD_ONNX, "loop": True, **stream}]
    return ServiceConfig.model_validate({"server": server or {}, "streams": streams})


@contextlib.contextmanager
def app_client(config: ServiceConfig, headers: dict[str, str] | None = None) -> Iterator[TestClient]:
    app = create_app(config)
    with TestClient(app, base_url="http://localhost", headers=headers or {}) as client:
        yield client


def wait_ready(client: TestClient, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while client.get("/health/ready").status_code != 200:
        assert time.monotonic() < deadline, client.get("/health/ready").json()
        time.sleep(0.05)
