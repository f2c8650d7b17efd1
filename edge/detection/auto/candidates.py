"""The engines that can run a model here, each with its own file of it as the plan resolved it (`ModelFiles`): what
auto measures and chooses among."""

from __future__ import annotations

from edge_inference.backends import engines
from edge_inference.edge.detection.auto.figures import Candidate
from edge_inference.edge.detection.model_files import ModelFiles
from edge_inference.edge.settings import Settings
from edge_inference.models.download import ChecksumMismatchError, local_file


def candidates(files: ModelFiles, settings: Settings) -> list[Candidate]:
    """Every engine (with the device it would use) that can run the model here; registry families count each
    engine's own file of the same weights, as the plan resolved them."""
    found = []
    for key, file in files.engines.items():
        try:
            path = local_file(file, settings.model_cache, settings.model_mirror)
        except ChecksumMismatchError:
            raise  # a swapped or corrupted cached file is the user's to know about, not a missing candidate
        except Exception:  # noqa: BLE001, S112 - a family member that cannot be fetched here is not a candidate
            continue
        offer = engines()[key].rank(path) if path.is_file() else None  # a file removed since it was resolved
        if offer is not None:  # what its timing child loads: the registry's name, else the file
            found.append(Candidate(key, offer.device, file.reference))
    return found
