import numpy as np

from edge_inference.models.decoders.nms import class_aware_nms, top_candidates


def _iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _reference_nms(boxes, scores, classes, thr):
    """The textbook greedy loop, one class at a time."""
    keep = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        if all(classes[i] != classes[k] or _iou(boxes[i], boxes[k]) <= thr for k in keep):
            keep.append(i)
    return keep


def test_matches_reference_on_random_boxes():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 300, (400, 2))
    wh = rng.uniform(10, 80, (400, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, 400).astype(np.float32)
    classes = rng.integers(0, 3, 400)
    kept = class_aware_nms(boxes, scores, classes, 0.45, max_detections=1000)
    assert kept.tolist() == _reference_nms(boxes, scores, classes, 0.45)


def test_different_classes_do_not_suppress_each_other():
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [1, 1, 10, 10]], dtype=np.float32)
    kept = class_aware_nms(boxes, np.array([0.9, 0.8, 0.7]), np.array([0, 1, 0]), 0.5, 100)
    assert kept.tolist() == [0, 1]


def test_max_detections_and_candidate_cap():
    boxes = np.array([[i * 20, 0, i * 20 + 10, 10] for i in range(50)], dtype=np.float32)
    kept = class_aware_nms(boxes, np.linspace(1, 0.1, 50), np.zeros(50, int), 0.5, max_detections=7)
    assert kept.tolist() == list(range(7))
    scores = np.arange(5000, dtype=np.float32)
    top = top_candidates(scores, limit=100)
    assert len(top) == 100 and set(top.tolist()) == set(range(4900, 5000))
    assert class_aware_nms(np.empty((0, 4)), np.empty(0), np.empty(0), 0.5, 10).size == 0


def test_a_crowd_of_more_candidates_than_the_cap_keeps_the_best_boxes_after_suppression():
    """OpenCV's `top_k` keeps that many candidates before suppressing: with 100, a 4K frame's 280 candidates (each
    person seen in up to four tiles) came down to 71 boxes and lost every person whose duplicates scored lower than
    other people's. The cap applies to the boxes kept, as Ultralytics' `max_det` does."""
    rng = np.random.default_rng(1)
    people = rng.uniform(0, 3000, (150, 2))
    copies = np.repeat(people, 3, axis=0) + rng.uniform(-2, 2, (450, 2))  # each seen three times
    boxes = np.hstack([copies, copies + 60]).astype(np.float32)
    scores = rng.uniform(0.3, 1, 450).astype(np.float32)
    classes = np.zeros(450, int)
    kept = class_aware_nms(boxes, scores, classes, 0.45, max_detections=100)
    assert kept.tolist() == _reference_nms(boxes, scores, classes, 0.45)[:100]


def test_opencv_and_numpy_suppression_keep_the_same_boxes():
    """OpenCV's batched NMS (used when present) and the numpy loop (the fallback) agree on random crowded frames."""
    from edge_inference.models.decoders.nms import _numpy_nms

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 80))
        corner = rng.uniform(0, 400, (n, 2))
        boxes = np.hstack([corner, corner + rng.uniform(5, 80, (n, 2))]).astype(np.float32)
        scores = rng.uniform(0.25, 1, n).astype(np.float32)
        classes = rng.integers(0, 3, n)
        fast = class_aware_nms(boxes, scores, classes, 0.45, 100)
        assert fast.tolist() == _numpy_nms(boxes, scores, classes, 0.45, 100).tolist()
