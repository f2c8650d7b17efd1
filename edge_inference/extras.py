"""How to add an extra, said one way everywhere: with this program's own Python (a venv's `pip` and the system's
are easily confused) and from where this install came: the folder `pip install .` was run in (the README's first
command, a clone), as pip recorded it, or the package's name where it came from an index."""

from __future__ import annotations

import functools
import json
import sys
from importlib.metadata import PackageNotFoundError, distribution
from urllib.parse import unquote, urlparse

NAME = "edge-inference"


@functools.cache
def installed_from() -> str:
    """The folder this distribution was installed from (PEP 610's direct_url.json), else its name."""
    try:
        recorded = distribution(NAME).read_text("direct_url.json")
    except PackageNotFoundError:
        return NAME
    if not recorded:
        return NAME
    url = str(json.loads(recorded).get("url", ""))
    return unquote(urlparse(url).path) if url.startswith("file://") else NAME


def install_extra(extras: str) -> str:
    """`PYTHON -m pip install 'SOURCE[extras]'`, right for this install wherever the user stands."""
    return f"{sys.executable} -m pip install '{installed_from()}[{extras}]'"
