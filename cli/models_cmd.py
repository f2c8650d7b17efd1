"""`edge models list|pull|verify|describe|export-triton`."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click

from edge_inference.backends import BackendError, engine_keys
from edge_inference.backends.discovery import choose_backend
from edge_inference.cli.app import cli
from edge_inference.cli.options import detector_config, detector_options
from edge_inference.edge.detection.loader import DetectorConfig, load_detector
from edge_inference.edge.detection.model_files import converted_folder, locate_model, model_for_engine
from edge_inference.edge.errors import EdgeError
from edge_inference.edge.settings import Settings, get_settings
from edge_inference.edge.tools.conversion.quantize import DEFAULT_METHOD
from edge_inference.models.download import is_cached, pull, verify
from edge_inference.models.registry import DEFAULT_MODEL, REGISTRY, RegistryEntry, get_entry, is_registry_name


def _settings(cache: str | None, mirror: str | None) -> Settings:
    """Flags win over EDGE_* variables; Settings validates both."""
    overrides: dict[str, Any] = {}
    if cache:
        overrides["model_cache"] = cache
    if mirror is not None:
        overrides["model_mirror"] = mirror or None
    return Settings(**overrides)


cache_option = click.option("--cache", envvar="EDGE_MODEL_CACHE", help="Cache folder [env EDGE_MODEL_CACHE].")
mirror_option = click.option(
    "--mirror",
    envvar="EDGE_MODEL_MIRROR",
    help="Folder or URL to pull from instead of upstream [env EDGE_MODEL_MIRROR].",
)


def the_file_named(config: DetectorConfig) -> DetectorConfig:
    """`auto` for a description: an engine that reads the named file itself, by rule and unmeasured (`auto` alone
    would time the engines and describe the fastest one's own file of the family: `yolox-nano-openvino`)."""
    if config.backend != "auto":
        return config
    _, path = locate_model(config.model, get_settings())
    ruled = choose_backend(path).backend
    readers = [key for key in [ruled, *engine_keys()] if model_for_engine(config.model, key)[0] == config.model]
    if not readers:
        return config  # no engine reads it: loading says why in one line
    return replace(config, backend=readers[0])


@cli.group()
def models() -> None:
    """The model registry: list, pull, verify, describe."""


@models.command("list")
@cache_option
@click.option("--json", "as_json", is_flag=True)
def list_models(cache: str | None, as_json: bool) -> None:
    """Registry models, their licence and whether they are cached."""
    settings = _settings(cache, None)
    rows = [
        {
            "name": e.name,
            "license": e.license,
            "cached": is_cached(e, settings.model_cache),
            "default": e.name == DEFAULT_MODEL,
            "description": e.description,
            "upstream": e.model_file.url or "(converted locally; mirror only)",
        }
        for e in REGISTRY.values()
    ]
    rows += converted_rows(settings)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'name':<26}{'licence':<12}{'cached':<8}description")
    for r in rows:
        mark = " (default)" if r["default"] else ""
        click.echo(f"{r['name']:<26}{r['license']:<12}{'yes' if r['cached'] else 'no':<8}{r['description']}{mark}")
    click.echo(f"\ncache: {settings.model_cache}")


def conversion_record(record_file: Path) -> dict[str, Any]:
    """What `edge models convert` recorded beside a file it made; one that cannot be read (cut short by a full disk,
    edited by hand) is said, not raised: the converted model itself still runs."""
    try:
        record = json.loads(record_file.read_text())
    except (OSError, ValueError) as exc:
        return {"unreadable": f"{record_file.name}: {exc}; convert the model again to remake it"}
    return record if isinstance(record, dict) else {"unreadable": f"{record_file.name} holds no record"}


def converted_rows(settings: Settings) -> list[dict[str, Any]]:
    """`edge models convert`'s files, each with what its record says it was made from and how it did."""
    rows = []
    for record_file in sorted(converted_folder(settings).glob("*.json")):
        record = conversion_record(record_file)
        made, table, calibration = (record.get(k, {}) for k in ("made_from", "table", "calibration"))
        ratio, spread = table.get("cpu_ratio"), table.get("cpu_ratio_interval")
        within = f" ({spread[0]}-{spread[1]})" if spread else ""
        speed = (
            f"CPU {ratio}x{within} the float model's"
            if ratio is not None
            else "run on a simulator: time it on the board"
        )
        description = (
            f"converted here; its record is unreadable ({record['unreadable']})"
            if "unreadable" in record
            else f"{record.get('target')} of {made.get('model')}, calibrated on {calibration.get('frames')} frames of "
            f"{calibration.get('source')}; agreement {table.get('agreement_map50')}, {speed}"
        )
        rows.append(
            {
                "name": record_file.name.removesuffix(".json").rsplit(".", 1)[0],
                "license": "as source",
                "cached": True,
                "default": False,
                "description": description,
                "upstream": "(converted here)",
                "record": record,
            }
        )
    return rows


@models.command("pull")
@click.argument("names", nargs=-1, required=True)
@cache_option
@mirror_option
def pull_models(names: tuple[str, ...], cache: str | None, mirror: str | None) -> None:
    """Download NAMES into the cache, checking each file's sha256."""
    settings = _settings(cache, mirror)
    for name in names:
        entry = get_entry(name)
        if entry.agpl:
            click.echo(f"note: {name} is {entry.license}; using it may oblige you to publish your source", err=True)
        path = pull(entry, settings.model_cache, settings.model_mirror)
        click.echo(f"{name}: {path}")


@models.command("verify")
@click.argument("names", nargs=-1)
@cache_option
def verify_models(names: tuple[str, ...], cache: str | None) -> None:
    """Check cached files against the registry's sha256 (all cached models when no NAMES)."""
    settings = _settings(cache, None)
    files = [Path(n).expanduser() for n in names if not is_registry_name(n)]
    for path in files:  # a compiled file of the user's: what runs on the TPU and what falls back to the CPU
        _say_operations(path)
    named = [get_entry(n) for n in names if is_registry_name(n)]
    entries = named or ([] if files else [e for e in REGISTRY.values() if is_cached(e, settings.model_cache)])
    bad = sum(_verified(entry, settings) for entry in entries)
    if not entries and not files:
        click.echo("nothing cached yet; `edge models pull NAME` fetches a model")
    if bad:
        raise EdgeError(f"{bad} model(s) failed verification")


def _verified(entry: RegistryEntry, settings: Settings) -> bool:
    """One cached registry file checked and said; True where it failed. An Edge TPU file's operations too."""
    problems = verify(entry, settings.model_cache)
    click.echo(f"{entry.name}: {'ok' if not problems else '; '.join(problems)}")
    if not problems and entry.model_file.path.endswith("_edgetpu.tflite"):
        _say_operations(settings.model_cache / entry.model_file.path, entry.name)
    return bool(problems)


def _say_operations(path: Path, name: str | None = None) -> None:
    """A .tflite's operations by where they run; anything else is no file this reads."""
    if not path.is_file():
        raise EdgeError(f"{path} is neither a registry model nor a file (`edge models list` names the registry's)")
    if path.suffix.lower() != ".tflite":
        raise EdgeError(f"{path.name}: operations are read from .tflite files (an Edge TPU compiled one above all)")
    try:
        from edge_inference.backends.edgetpu_runtime import operations_split

        split = operations_split(path)
    except BackendError as exc:  # no LiteRT in this install
        split = str(exc)
    click.echo(f"{name or path.name}: {split}")


@models.command("describe")
@click.argument("name", required=False)
@detector_options
def describe(name: str | None, **kwargs: Any) -> None:
    """How a model file is read: tensors, decoder, pre-processing, and where each setting came from. NAME (or
    --model) is a registry name or a file; that very file is described, on an engine that reads it."""
    if name:
        kwargs["model"] = name
    detector = load_detector(the_file_named(detector_config(kwargs)))
    backend, spec = detector.backend, detector.spec
    for note in backend.notes:  # `auto` may mean another engine's file of a family: say which one is described
        click.echo(f"note: {note}", err=True)
    info = {
        **detector.description,
        "inputs": [f"{t.name} {list(t.shape)} {t.dtype} q={t.quantization}" for t in backend.inputs],
        "outputs": [f"{t.name} {list(t.shape)} {t.dtype} q={t.quantization}" for t in backend.outputs],
        "preprocessing": asdict(spec.preprocessing),
        "classes": len(spec.labels),
        "sources": spec.sources,
    }
    record = Path(f"{backend.model_path}.json")
    if record.parent == converted_folder() and record.is_file():  # what `edge models convert` made it from
        info["conversion"] = conversion_record(record)
    click.echo(json.dumps(info, indent=2, default=str))
    detector.close()


@models.command("export-triton")
@click.argument("model")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", help="The model's name on the server [default: the registry name or the file's stem].")
@click.option(
    "--max-batch-size",
    type=click.IntRange(0, 256),
    default=8,
    show_default=True,
    help="Frames the server may batch together (0: none).",
)
@click.option(
    "--queue-delay-us",
    type=click.IntRange(0),
    default=2000,
    show_default=True,
    help="How long the dynamic batcher waits for requests to join a batch.",
)
@click.option(
    "--instances",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Copies of the model the server runs at once.",
)
@click.option(
    "--input",
    "takes",
    type=click.Choice(["pixels", "tensor"]),
    default="pixels",
    show_default=True,
    help="pixels: the model takes the letterboxed uint8 frame (a quarter of the bytes; cast and normalised on the "
    "server); tensor: its own float input, as exported.",
)
@click.option(
    "--kind",
    type=click.Choice(["gpu", "cpu"]),
    default="gpu",
    show_default=True,
    help="Where the server runs those copies.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Where the model's folder exists: replace its config.pbtxt and 1/model.onnx (nothing else there).",
)
@mirror_option
def export_triton(model: str, folder: Path, name: str | None, mirror: str | None, **kwargs: Any) -> None:
    """Write a Triton model repository for MODEL (a registry name or an ONNX file) into FOLDER: the server side of
    many cameras on one GPU. Run `tritonserver --model-repository FOLDER` there, point the cameras' boxes at it."""
    from edge_inference.models.triton_repository import (
        ExportOptions,
        check_model_name,
        default_model_name,
        export_repository,
    )

    if name is not None:
        check_model_name(name)  # before anything is read or written
    settings = _settings(None, mirror)
    target, reason = model_for_engine(model, "onnx")  # a registry family's ONNX file
    if target is None:
        raise EdgeError(f"{reason}: Triton's repository here takes an ONNX model")
    stem, path = locate_model(target, settings)
    options = ExportOptions(
        kwargs["max_batch_size"],
        kwargs["queue_delay_us"],
        kwargs["instances"],
        f"KIND_{kwargs['kind'].upper()}",
        pixels=kwargs["takes"] == "pixels",
        force=kwargs["force"],
    )
    name = name or default_model_name(stem)
    exported = export_repository(path, folder, name, options)
    for note in exported.notes:
        click.echo(f"note: {note}", err=True)
    batching = f"dynamic batching up to {options.max_batch_size}" if exported.batching else "no batching"
    click.echo(f"{exported.folder}: {path.name} as version 1, {batching}, {exported.takes}")
    click.echo(f"server:  tritonserver --model-repository {folder.resolve()}")
    click.echo(
        f"   or:   docker run --gpus all --rm -p 8000:8000 -p 8001:8001 -v {folder.resolve()}:/models "
        "nvcr.io/nvidia/tritonserver:<yy.mm>-py3 tritonserver --model-repository /models"
    )
    click.echo(f"cameras: edge serve --model triton+grpc://SERVER:8001/{name} --source CAMERA")


@models.command("convert")
@click.argument("model")
@click.option(
    "--to",
    "target",
    required=True,
    help="onnx-int8 (ONNX Runtime), openvino-int8 (NNCF), rknn (Rockchip's rknn-toolkit2, in its own environment) "
    "or tflite-int8 (onnx2tf, full integer: the Edge TPU compiler's input). hailo says where Hailo's compiler is.",
)
@click.option(
    "--target-platform",
    "platform",
    type=click.Choice(["rk3588", "rk3576", "rk3566", "rk3568", "rk3562"]),
    default="rk3588",
    show_default=True,
    help="rknn: the Rockchip NPU the file is made for.",
)
@click.option(
    "--split-head/--no-split-head",
    default=None,
    help="rknn: the head split as rknn_model_zoo splits YOLOv8/YOLO11 (per stride box logits, class scores, their "
    "sum; DFL on the CPU). [default: split where the model has that head]",
)
@click.option("--calibrate", required=True, help="Your camera or footage: a camera, an RTSP URL, a video, a folder.")
@click.option(
    "--eval", "evaluate", help="Other footage to judge the conversion on [default: the second half of --calibrate]."
)
@click.option(
    "--output", type=click.Path(dir_okay=False, path_type=Path), help="[default: the model cache's converted/]"
)
@click.option(
    "--method",
    type=click.Choice(["minmax", "entropy", "percentile"]),
    default=DEFAULT_METHOD,
    show_default=True,
    help="onnx-int8: ONNX Runtime's calibration method.",
)
@click.option(
    "--frames",
    type=click.IntRange(4, 2000),
    default=100,
    show_default=True,
    help="Calibration frames (and as many evaluation frames), spread over the footage.",
)
@click.option("--no-progress", is_flag=True)
@mirror_option
def convert_model(
    model: str,
    target: str,
    calibrate: str,
    evaluate: str | None,
    output: Path | None,
    method: str,
    platform: str,
    split_head: bool | None,
    frames: int,
    no_progress: bool,
    mirror: str | None,
) -> None:
    """Make MODEL int8 for this device with the vendor's tool, calibrated on your own camera, and judge it on
    other frames of it against the float model: size, CPU per frame, agreement. `edge serve --model NAME-int8`
    then runs it."""
    from edge_inference.edge.tools.conversion.convert import convert

    done = convert(
        model,
        target,
        calibrate,
        _settings(None, mirror),
        evaluate=evaluate,
        output=output,
        method=method,
        counts=(frames, frames),
        progress=not no_progress,
        platform=platform,
        split_head=split_head,
    )
    table, calibration, evaluation = done.record["table"], done.record["calibration"], done.record["evaluation"]
    judged_on = "" if evaluation["source"] == calibration["source"] else f" of {evaluation['source']}"
    click.echo(
        f"calibrated on {calibration['frames']} frames of {calibration['source']} ({calibration['frames_with_motion']}"
        f" where something moved), judged on {evaluation['frames']} others{judged_on}"
    )
    for note in done.record["notes"]:
        click.echo(f"note: {note}", err=True)
    click.echo(f"{'':<8}{'size MiB':>10}{'CPU ms/frame':>14}{'fps':>8}")
    for side in ("float", "int8"):
        row = table[side]
        cpu, fps = row["cpu_ms_per_frame"] or "-", row["fps"] or "-"  # a simulator's run is not timed
        click.echo(f"{side:<8}{row['size_mib']:>10}{cpu:>14}{fps:>8}")
    per_class = ", ".join(f"{label} {ap}" for label, ap in table["agreement_per_class"].items())
    click.echo(
        f"agreement with the float model (mAP@0.5): {table['agreement_map50']}"
        + (f" ({per_class})" if per_class else "")
    )
    click.echo(done.record["verdict"])
    if "runs_on" in done.record:
        click.echo(f"int8 ran on {done.record['runs_on']}")
    if "edgetpu" in done.record:
        click.echo(f"for the Edge TPU: {done.record['edgetpu']}")
    kept = ""
    if "kept_in_float" in done.record:
        kept = f"the stem and the head kept in float, nodes: {len(done.record['kept_in_float'])}; "
    if "kept_in_float16" in done.record:
        kept = f"the stem and the head kept in float16, subgraphs: {len(done.record['kept_in_float16'])}; "
    click.echo(f"{done.name}: {done.path} ({kept}record {done.path}.json)")
