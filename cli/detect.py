"""`edge detect IMAGE...`: detections for still images (and every frame of a video) as a table or JSON lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import cv2

from edge_inference.cli.app import cli
from edge_inference.cli.detect_video import detect_video, is_video, saved_as
from edge_inference.cli.options import check_classes, detector_config, detector_options
from edge_inference.edge.detection.loader import load_detector
from edge_inference.edge.detection.report import result_record, result_table
from edge_inference.edge.stream.drawing import draw_detections
from edge_inference.edge.stream.images import ImageError, read_image
from edge_inference.edge.stream.sources import IMAGE_SUFFIXES, images_in_folder


def _images_in(paths: tuple[Path, ...]) -> tuple[list[Path], int]:
    """The files given, and a folder's images and videos (sorted, not its sub-folders), as Ultralytics'
    `source=folder/` runs them; with the number of arguments that named nothing to run, each said in one line."""
    found, failures = [], 0
    for path in paths:
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            videos = [p for p in path.iterdir() if is_video(p) and p.is_file()]
            inside = sorted([*images_in_folder(path), *videos])
            if not inside:
                images = ", ".join(sorted(IMAGE_SUFFIXES))
                click.echo(f"error: {path}: a folder with no images ({images}) or videos (.mp4, .mkv, ...)", err=True)
                failures += 1
            found += inside
        else:
            click.echo(f"error: {path}: no such file", err=True)
            failures += 1
    return found, failures


@cli.command()
@click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
@detector_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per image (per frame of a video).")
@click.option(
    "--save",
    type=click.Path(path_type=Path),
    help="Write the image (a video: the video) with labelled boxes (a folder for several).",
)
def detect(images: tuple[Path, ...], as_json: bool, save: Path | None, **kwargs: Any) -> None:
    """Detect objects in IMAGES (files, or folders of them); a video runs every frame."""
    readable, failures = _images_in(images)  # inputs first: nothing is loaded for a typo
    if not readable:
        raise SystemExit(1)
    config = detector_config(kwargs)
    detector = load_detector(config)
    check_classes(detector, config.classes)
    for note in detector.backend.notes:
        click.echo(f"note: {note}", err=True)
    for path in readable:
        if is_video(path):
            failures += not detect_video(path, detector, as_json, save, len(readable) > 1)
            continue
        try:
            image = read_image(path)
        except ImageError as exc:
            click.echo(f"error: {exc}", err=True)
            failures += 1
            continue
        result = detector.detect(image)
        record = result_record(str(path), result, detector)
        click.echo(json.dumps(record) if as_json else result_table(record))
        if save is not None:
            target = saved_as(save, path, len(readable) > 1, IMAGE_SUFFIXES, ".jpg")
            if not cv2.imwrite(str(target), draw_detections(image, result.detections)):
                raise ImageError(f"cannot write {target}; use a .jpg or .png name in a writable folder")
    detector.close()
    if failures:
        raise SystemExit(1)
