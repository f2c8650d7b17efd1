"""`edge serve --exit-at-end`: the service stops once every stream's source has ended, as uvicorn stops on SIGTERM
(its answers finished, the streams closed), so a script that serves a file gets its prompt back."""

from __future__ import annotations

import logging
import threading
from typing import Any

from edge_inference.edge.runtime.streams import StreamManager

log = logging.getLogger("edge.serve")
LOOK_EVERY_S = 0.5


def every_source_ended(manager: StreamManager) -> bool:
    pipelines = list(manager.pipelines.values())
    return bool(pipelines) and all(p.state == "ended" for p in pipelines)


def stop_when_every_source_ended(manager: StreamManager, server: Any) -> threading.Thread:
    """A watcher that sets uvicorn's `should_exit` once every source has ended."""

    def watch() -> None:
        while not server.should_exit:
            if every_source_ended(manager):
                log.info("every source has ended: stopping (--exit-at-end)")
                server.should_exit = True
                return
            threading.Event().wait(LOOK_EVERY_S)

    watcher = threading.Thread(target=watch, name="exit-at-end", daemon=True)
    watcher.start()
    return watcher
