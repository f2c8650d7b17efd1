"""`edge detect IMAGE...`: detections for still images (and every frame of a video) as a table or JSON lines."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import cv2
import numpy as np

from edge_inference.cli.app import cli
from edge_inference.cli.detect_video import detect_video, named_path, saved_as
from edge_inference.cli.options import check_classes, detector_config, detector_options, home_expanded
from edge_inference.edge.config.paths import with_path_meant
from edge_inference.edge.detection.loader import load_detector
from edge_inference.edge.detection.report import result_record, result_table
from edge_inference.edge.secrets import mask_url
from edge_inference.edge.stream.drawing import draw_detections
from edge_inference.edge.stream.images import (
    IMAGE_SUFFIXES,
    NO_MEDIA,
    ImageError,
    is_video,
    media_in_folder,
    read_image,
)
from edge_inference.edge.stream.sources import STREAM_SCHEMES, HttpSource, SourceError, check_not_a_video_page
from edge_inference.models.tiles import DEFAULT_OVERLAP, parse_tiles


def _images_in(items: tuple[str, ...]) -> tuple[list[Path | str], int]:
    """The files given, a folder's images and videos (sorted, not its sub-folders) and URLs, as Ultralytics'
    `source=` runs them; with the number of arguments that named nothing to run, each said in one line."""
    found: list[Path | str] = []
    failures = 0
    for item in items:
        path = Path(item).expanduser()  # a quoted `~/x.jpg`, or one from a script: no shell expanded it
        if item.startswith(STREAM_SCHEMES):
            found.append(item)
        elif path.is_file():
            found.append(path)
        elif path.is_dir():
            inside = media_in_folder(path)
            if not inside:
                click.echo(f"error: {path}: a folder with {NO_MEDIA}", err=True)
                failures += 1
            found += inside
        else:
            click.echo(f"error: {with_path_meant(f'{path}: no such file', path)}", err=True)
            failures += 1
    return found, failures


@cli.command()
@click.argument("images", nargs=-1, required=True)
@detector_options
@click.option(
    "--tiles",
    metavar="auto|COLSxROWS",
    help="Cut a big frame into overlapping tiles, each run at the model's scale, and merge the boxes: finds people "
    "a few dozen pixels tall in a 4K frame. auto: tiles the size the model was trained at, and the full frame.",
)
@click.option(
    "--tile-overlap",
    type=float,
    default=DEFAULT_OVERLAP,
    show_default=True,
    help="The share of a tile its neighbour overlaps (above 0, at most 0.5).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per image (per frame of a video).")
@click.option(
    "--save",
    type=click.Path(path_type=Path),
    callback=home_expanded,
    help="Write the image (a video: the video) with labelled boxes (a folder for several).",
)
def detect(
    images: tuple[str, ...], tiles: str | None, tile_overlap: float, as_json: bool, save: Path | None, **kwargs: Any
) -> None:
    """Detect objects in IMAGES (files, folders of them, or URLs); a video or a stream runs every frame."""
    tiling = None if tiles is None else parse_tiles(tiles, tile_overlap)  # a bad grid before anything is read
    readable, failures = _images_in(images)  # inputs first: nothing is loaded for a typo
    if not readable:
        raise SystemExit(1)
    config = replace(detector_config(kwargs), tiling=tiling)
    detector = load_detector(config)
    check_classes(detector, config.classes)
    for note in detector.backend.notes:
        click.echo(f"note: {note}", err=True)
    try:
        many = len(readable) > 1
        for path in readable:
            try:
                image = _image_of(path)
            except ImageError as exc:
                click.echo(f"error: {exc}", err=True)
                failures += 1
                continue
            if image is None:  # a video, or a stream: every frame
                failures += not detect_video(path, detector, as_json, save, many)
                continue
            result = detector.detect(image)
            record = result_record(mask_url(str(path)), result, detector)
            click.echo(json.dumps(record) if as_json else result_table(record))
            if save is not None:
                target = saved_as(save, named_path(path), many, IMAGE_SUFFIXES, ".jpg")
                if not cv2.imwrite(str(target), draw_detections(image, result.detections)):
                    raise ImageError(f"cannot write {target}; use a .jpg or .png name in a writable folder")
    finally:
        detector.close()  # an engine's resources (a server's shared memory regions) go with it, also on an error
    if failures:
        raise SystemExit(1)


def _image_of(path: Path | str) -> np.ndarray | None:
    """The image a file or URL holds; None for a video or a stream, run frame by frame."""
    if isinstance(path, str):
        return _snapshot(path)
    return None if is_video(path) else read_image(path)


def _snapshot(url: str) -> np.ndarray | None:
    """The image an http(s) URL answers (a photo, a camera's snapshot), or None for a stream or a video to run
    frame by frame; a URL that cannot be read raises its one-line error."""
    if not url.startswith(("http://", "https://")):
        return None
    source = HttpSource(url)
    try:
        check_not_a_video_page(url)
        source.open()
        return source.read() if source.kind == "snapshot" else None
    except SourceError as exc:
        raise ImageError(str(exc)) from None
    finally:
        source.close()
