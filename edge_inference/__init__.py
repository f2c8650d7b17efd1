"""edge-inference: real-time object detection on edge devices.

The one import name this distribution installs. Its parts keep their folders at the repository's top level
(``cli/``, ``service/``, ``edge/``, ``backends/``, ``models/``, see ARCHITECTURE.md); ``edge_inference/`` links to
them, so the wheel, an editable install and the tools all see one package, ``edge_inference``, and nothing else
lands in site-packages.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("edge-inference")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
