"""Class names, in their one home: COCO's 80 classes and its original 91-id numbering (0-based, with gaps) used by
SSD models; label files (one name per line, or "id name" per line) read by `load_labels`; and labels as a config,
an MQTT topic or an upload names them (`label_key`: "Person", "traffic_light"), matched to the model's.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable, Mapping
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


def label_key(name: str) -> str:
    """A label as configs, MQTT topics and Home Assistant's object ids name it ([a-z0-9_-]+): "Person" is the
    model's "person", "traffic_light" and "Traffic Light" its "traffic light", "Fußgänger" "fussganger". A letter
    with no ASCII form keeps its code point ("狗" is "u72d7"): a model's labels in Chinese were all "unnamed"."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", name.casefold()) if not unicodedata.combining(c))
    spelled = "".join(c if c.isascii() else f"_u{ord(c):04x}_" for c in plain)
    return re.sub(r"[^a-z0-9-]+", "_", spelled).strip("_") or "unnamed"


NUMBERED_CLASS = re.compile(r"class_(\d+)")  # a class without a name in the label file, as it is shown
Classes = Mapping[str | int, float | None]  # label (or class id) -> its least score, None: the stream's conf


def class_minimums(labels: Mapping[int, str], classes: Classes, conf: float) -> dict[int, float]:
    """The classes to report, by id, each with the least score reported: `classes` names them by label as
    `label_key` spells it ("Person", "traffic_light"), as `class_7`, or by id (Ultralytics' `classes=[0, 2]`).
    Names the model does not have are left out here; the stream says so where it checks its labels."""
    by_key = {label_key(name): class_id for class_id, name in labels.items()}
    wanted: dict[int, float] = {}
    for name, score in classes.items():
        if isinstance(name, int):
            class_id: int | None = name
        elif numbered := NUMBERED_CLASS.fullmatch(name):
            class_id = int(numbered.group(1))
        else:
            class_id = by_key.get(label_key(name))
        if class_id is not None:
            wanted[class_id] = conf if score is None else score
    return wanted


class LabelSet:
    """Labels as a config names them, matched as `label_key` spells them ("Person", "traffic_light"); empty: every
    label. A model has a few dozen labels: each one's answer is kept after its first frame."""

    def __init__(self, names: list[str]) -> None:
        self._keys = {label_key(name) for name in names}
        self._answers: dict[object, bool] = {}

    def __contains__(self, label: object) -> bool:
        if not self._keys:
            return True
        answer = self._answers.get(label)
        if answer is None:
            answer = self._answers[label] = label_key(str(label)) in self._keys
        return answer


def unknown_labels(names: list[str], model_labels: list[str]) -> list[str]:
    """Each of `names` the model cannot detect, with the model's nearest label where one is close:
    ["'persons' (did you mean 'person'?)"]."""
    keys = {label_key(label): label for label in model_labels}
    unknown = []
    for name in names:
        if label_key(name) in keys or NUMBERED_CLASS.fullmatch(name):
            continue
        near = difflib.get_close_matches(label_key(name), list(keys), n=1, cutoff=0.6)
        unknown.append(f"{name!r}" + (f" (did you mean {keys[near[0]]!r}?)" if near else ""))
    return unknown


def unknown_classes(labels: Mapping[int, str], classes: Iterable[str | int]) -> list[str]:
    """Each of `classes` (labels, or class ids as Ultralytics' `classes=[0, 2]`) that the model does not have."""
    chosen = list(classes)
    unknown = unknown_labels([str(c) for c in chosen if not isinstance(c, int)], list(labels.values()))
    return unknown + [str(c) for c in chosen if isinstance(c, int) and labels and c not in labels]


def labels_listed(labels: list[str], most: int = 12) -> str:
    """A model's labels as a message shows them: the first `most`, and how many there are in all."""
    more = f", ... ({len(labels)} in all)" if len(labels) > most else ""
    return ", ".join(labels[:most]) + more
