"""MkDocs hook: the configuration reference page gets its tables from the config models at build time."""

from __future__ import annotations

from typing import Any

PLACE = "<!-- the config models' tables -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if PLACE not in markdown:
        return markdown
    from edge_inference.edge.tools.config_reference import config_reference

    return markdown.replace(PLACE, config_reference())
