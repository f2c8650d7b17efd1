"""The offline site asks no one for anything: Material's offline plugin loads its search worker's shim (iframe-worker,
for pages opened from the disk) from unpkg.com; the same file, kept under docs/assets/, is linked instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REMOTE = "https://unpkg.com/iframe-worker/shim"
LOCAL = "assets/iframe-worker-shim.js"


def on_post_build(config: Any, **_: Any) -> None:
    site = Path(config["site_dir"])
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        if REMOTE in text:
            depth = len(page.relative_to(site).parts) - 1
            page.write_text(text.replace(REMOTE, "../" * depth + LOCAL), encoding="utf-8")
