"""`--backend auto` made concrete: the engines that can run the model here, the measured pick among them
(`choice.py`) or, where there is none to serve, the engines' ranking."""

from __future__ import annotations

import os
from dataclasses import replace

from edge_inference.backends.discovery import choose_backend
from edge_inference.edge.detection.auto.candidates import candidates
from edge_inference.edge.detection.auto.choice import AutoChoice, measured_pick
from edge_inference.edge.detection.auto.figures import Candidate
from edge_inference.edge.detection.auto.store import cache_key
from edge_inference.edge.detection.model_files import ModelFiles
from edge_inference.edge.detection.opening import DetectorConfig
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.models.download import local_file


def decide_auto(
    config: DetectorConfig, files: ModelFiles, settings: Settings, wait: bool = True, stored_only: bool = False
) -> tuple[DetectorConfig, AutoChoice]:
    """`--backend auto` made concrete (engine, device, that engine's file of the model), and the choice with the
    note saying why (its `reason`, rewritten for the user). Without `wait`, a measurement still to make does not
    hold the caller (the ranking's pick, `pending`); `stored_only`: measure nothing (see `auto_choice`)."""
    served = files.served_by
    if served is not None:  # the reference names its engine: nothing to measure, no other engine to run it
        note = f"--backend auto chose {served}: the model is on a server"
        return replace(config, backend=served), AutoChoice(served, config.device, files.model, note)
    measure = config.device == "auto"
    choice = auto_choice(files, settings, measure=measure, wait=wait, stored_only=stored_only)
    # a family name means each engine's own file of it: say which one runs
    which = f" ({choice.model})" if choice.model != config.model else ""
    if config.device == "auto":
        note = f"--backend auto chose {choice.backend} on {choice.device}{which}: {choice.reason}"
    else:  # the device was the user's: the choice's own device reasoning would contradict what runs
        note = f"--backend auto chose {choice.backend}{which} for {config.model}"
    device = choice.device if config.device == "auto" else config.device
    decided = replace(config, model=choice.model, backend=choice.backend, device=device)
    return decided, replace(choice, reason=note)


def auto_choice(
    files: ModelFiles,
    settings: Settings | None = None,
    *,
    measure: bool = True,
    wait: bool = True,
    stored_only: bool = False,
) -> AutoChoice:
    """The engine `--backend auto` runs `model` on, measured once per model, engines and machine; by the engines'
    ranking when `measure` is off (a device the user named: only the ranking knows which engine has it). With
    `wait` off, a measurement still to make runs in the background and the ranking's choice comes back at once,
    marked `pending` (the service: frames now, the measured pick once known). With `stored_only`, nothing is
    measured: the stored pick, or the ranking's while none is stored (`edge serve --check`)."""
    settings = settings or get_settings()
    found = candidates(files, settings)
    measured = measure and len(found) > 1 and os.environ.get("EDGE_AUTO_MEASURE", "1") != "0"
    # the key first, then the measured pick: nothing here goes back to a module it has left (issue 61's walk)
    picked = measured_pick(cache_key(found), found, files.model, settings, wait, stored_only) if measured else None
    if isinstance(picked, AutoChoice):
        return picked
    why, pending = (picked.why, picked.pending) if picked is not None else ("", None)
    return replace(_by_rule(files, settings, found, why), pending=pending)


def _by_rule(files: ModelFiles, settings: Settings, found: list[Candidate], why: str = "") -> AutoChoice:
    choice = choose_backend(local_file(files.given, settings.model_cache, settings.model_mirror))
    model = files.model
    if len(found) == 1:
        only = found[0]
        return AutoChoice(only.backend, only.device, only.model, f"the only engine here that runs it ({choice.reason})")
    prefix = f"{why}; " if why else ""
    return AutoChoice(choice.backend, choice.device, model, prefix + choice.reason)
