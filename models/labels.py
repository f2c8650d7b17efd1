"""Class names: COCO's 80 classes and its original 91-id numbering (0-based, with gaps) used by SSD models.

Label files (one name per line, or "id name" per line) are read by `load_labels`.
"""

from __future__ import annotations

from pathlib import Path

from edge_inference.models.errors import ModelError

COCO80: tuple[str, ...] = (
    "person",
    "bicycle",
    "car",
    "motorcycle",
    "airplane",
    "bus",
    "train",
    "truck",
    "boat",
    "traffic light",
    "fire hydrant",
    "stop sign",
    "parking meter",
    "bench",
    "bird",
    "cat",
    "dog",
    "horse",
    "sheep",
    "cow",
    "elephant",
    "bear",
    "zebra",
    "giraffe",
    "backpack",
    "umbrella",
    "handbag",
    "tie",
    "suitcase",
    "frisbee",
    "skis",
    "snowboard",
    "sports ball",
    "kite",
    "baseball bat",
    "baseball glove",
    "skateboard",
    "surfboard",
    "tennis racket",
    "bottle",
    "wine glass",
    "cup",
    "fork",
    "knife",
    "spoon",
    "bowl",
    "banana",
    "apple",
    "sandwich",
    "orange",
    "broccoli",
    "carrot",
    "hot dog",
    "pizza",
    "donut",
    "cake",
    "chair",
    "couch",
    "potted plant",
    "bed",
    "dining table",
    "toilet",
    "tv",
    "laptop",
    "mouse",
    "remote",
    "keyboard",
    "cell phone",
    "microwave",
    "oven",
    "toaster",
    "sink",
    "refrigerator",
    "book",
    "clock",
    "vase",
    "scissors",
    "teddy bear",
    "hair drier",
    "toothbrush",
)

# Original COCO category ids minus one, as TensorFlow's object-detection models emit them.
COCO90_IDS: tuple[int, ...] = (
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    12,
    13,
    14,
    15,
    16,
    17,
    18,
    19,
    20,
    21,
    22,
    23,
    24,
    26,
    27,
    30,
    31,
    32,
    33,
    34,
    35,
    36,
    37,
    38,
    39,
    40,
    41,
    42,
    43,
    45,
    46,
    47,
    48,
    49,
    50,
    51,
    52,
    53,
    54,
    55,
    56,
    57,
    58,
    59,
    60,
    61,
    62,
    63,
    64,
    66,
    69,
    71,
    72,
    73,
    74,
    75,
    76,
    77,
    78,
    79,
    80,
    81,
    83,
    84,
    85,
    86,
    87,
    88,
    89,
)

COCO90: dict[int, str] = dict(zip(COCO90_IDS, COCO80, strict=True))


class LabelFileError(ModelError):
    pass


def load_labels(path: Path) -> dict[int, str]:
    """Read "name" lines (ids are line numbers) or "id name" lines (ids as written)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LabelFileError(f"cannot read label file {path}: {exc.strerror}") from None
    try:  # Windows editors' byte-order marks: UTF-8's would become part of the first label and match nothing
        text = data.decode("utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise LabelFileError(
            f"label file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}): save it as UTF-8"
        ) from None
    rows = [line.strip() for line in text.splitlines() if line.strip()]
    labels: dict[int, str] = {}
    for index, row in enumerate(rows):
        head, _, rest = row.partition(" ")
        if head.isdigit() and rest.strip():
            labels[int(head)] = rest.strip()
        else:
            labels[index] = row
    return labels


def label_for(labels: dict[int, str], class_id: int) -> str:
    return labels.get(class_id, f"class_{class_id}")
