"""Images that arrive as text: base64 (Roboflow's hosted API takes `base64 photo.jpg | curl -d @- URL`), a browser
canvas's `data:image/jpeg;base64,...` URL, or JSON holding either (`{"image": "..."}`, or Roboflow inference's
`{"image": {"type": "base64", "value": "..."}}`). They were all answered "another format, or damaged", which sent
client authors looking for a broken file. A binary body, the usual case, passes through untouched."""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

from fastapi import HTTPException

# base64 text, with line breaks as `base64` writes them, in either alphabet (standard or URL-safe)
_BASE64_TEXT = re.compile(rb"[A-Za-z0-9+/_-]+={0,2}")
_SNIFF_BYTES = 1024
_URL_SAFE = bytes.maketrans(b"-_", b"+/")
SEND_AS = "send the image's bytes as the body (curl --data-binary @photo.jpg) or as a file (curl -F image=@photo.jpg)"
NO_FETCH = f"the service does not fetch images from URLs (a client could make it reach any address): {SEND_AS}"
# how the images the service reads begin: JPEG, PNG, GIF, BMP, TIFF (both byte orders), WebP and AVIF (RIFF, ISO box)
IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF8", b"BM", b"II*\x00", b"MM\x00*", b"RIFF", b"\x00\x00\x00")
# where clients put an image's URL: Roboflow's hosted API takes `?image=https://...` with an empty body
URL_PARAMETERS = ("image", "url", "image_url")


def refuse_url_parameter(body: bytes, parameters: Mapping[str, str]) -> None:
    """An empty body with the image's URL in the query: said as a URL, not as "the file is empty"."""
    if not body and any(parameters.get(name, "").startswith(("http://", "https://")) for name in URL_PARAMETERS):
        raise HTTPException(415, NO_FETCH)


def image_bytes(body: bytes, content_type: str) -> bytes:
    """The image in a raw body: the bytes themselves, or decoded where the body is one of the text forms above."""
    head = body[:_SNIFF_BYTES].lstrip()
    if content_type.startswith("application/json") or head.startswith((b"{", b"[")):
        return _from_json(body)
    if head.startswith(b"data:"):
        return _from_data_url(body.strip())
    if head and _BASE64_TEXT.fullmatch(b"".join(head.split())[: _SNIFF_BYTES // 2]):
        return _from_base64(body)
    if content_type.startswith("application/x-www-form-urlencoded") and not _whole_image(body):
        # curl -d @photo.jpg sends a binary file as form text, dropping its line-break bytes: the image is damaged.
        # curl --data-binary declares the same type without -H, and its bytes are whole: the bytes say which
        raise HTTPException(
            415, f"the body was sent as form text (curl -d), which damages a binary image on the way: {SEND_AS}"
        )
    return body


def _whole_image(body: bytes) -> bool:
    """An image's bytes as they were: they begin as an image does and still hold the line-break bytes that curl -d
    drops (a photo's compressed data holds some in every few hundred bytes)."""
    return body.startswith(IMAGE_MAGIC) and b"\n" in body


def _from_base64(text: bytes | str) -> bytes:
    data = text.encode("ascii", "replace") if isinstance(text, str) else text
    if b"-" in data or b"_" in data:
        data = data.translate(_URL_SAFE)  # one copy, and only for the URL-safe alphabet: a Pi holds a few uploads
    try:
        return binascii.a2b_base64(data)  # line breaks skipped as it reads, with no copy of the text without them
    except (binascii.Error, ValueError):
        raise HTTPException(400, f"the body looks like base64 text but does not decode as base64: {SEND_AS}") from None


def _from_data_url(url: bytes | str) -> bytes:
    text = url.decode("ascii", "replace") if isinstance(url, bytes) else url
    meta, comma, data = text.partition(",")
    if not comma or not meta.endswith(";base64"):
        raise HTTPException(400, f"a data: URL must hold the image in base64 (data:image/jpeg;base64,...): {SEND_AS}")
    return _from_base64(data)


def _from_json(body: bytes) -> bytes:
    try:
        document: Any = json.loads(body)
    except (ValueError, RecursionError):
        raise HTTPException(400, f'the JSON body cannot be read: send {{"image": "<base64>"}}, or {SEND_AS}') from None
    image = document.get("image") if isinstance(document, dict) else None
    if isinstance(image, dict):  # Roboflow inference's {"type": "base64" | "url" | ..., "value": ...}
        if image.get("type") == "url":
            raise HTTPException(415, NO_FETCH)
        image = image.get("value") if image.get("type") in ("base64", None) else None
    if isinstance(image, str) and image.startswith(("http://", "https://")):  # {"image": "https://..."}
        raise HTTPException(415, NO_FETCH)
    if not isinstance(image, str) or not image:
        raise HTTPException(
            400, f'a JSON body takes one image, in base64 or as a data: URL, as "image": "<base64>"; or {SEND_AS}'
        )
    return _from_data_url(image) if image.startswith("data:") else _from_base64(image)
