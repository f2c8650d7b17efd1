"""Pages of the site that live at the repository's top level, where a contributor looks first: ARCHITECTURE.md
becomes the Development tab's "Architecture" page, written from the file at build time (one copy, never two)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[2]
PAGES = {"ARCHITECTURE.md": "development/architecture.md"}


def on_files(files: Files, config: Any, **_: Any) -> Files:
    for source, page in PAGES.items():
        text = (REPO / source).read_text(encoding="utf-8")
        # its links are written from the repository's root; the page sits one folder down in docs/
        text = text.replace("](docs/", "](../")
        files.append(File.generated(config, page, content=text))
    return files
