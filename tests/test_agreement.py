import pytest

from edge_inference.models.agreement import ENOUGH_BOXES, agreement
from edge_inference.models.detection import BoxXYXY, Detection


def det(label, score, x1, y1, x2, y2):
    return Detection(0, label, score, BoxXYXY(x1, y1, x2, y2))


def test_identical_detections_agree_fully():
    frames = [[det("person", 0.9, 0, 0, 10, 10), det("car", 0.8, 20, 20, 40, 40)], [det("person", 0.7, 5, 5, 9, 9)]]
    result = agreement(frames, frames)
    assert result.map50 == pytest.approx(1.0) and result.per_class == {"person": 1.0, "car": 1.0}


def test_misses_false_positives_and_wrong_classes_lower_the_score():
    reference = [[det("person", 0.9, 0, 0, 10, 10), det("person", 0.9, 50, 50, 60, 60)]]
    # one hit, one miss: recall 0.5 at precision 1 -> AP 0.5
    assert agreement(reference, [[det("person", 0.8, 1, 1, 10, 10)]]).map50 == pytest.approx(0.5)
    # a confident false positive ranked before the hits
    candidate = [
        [det("person", 0.99, 100, 100, 120, 120), det("person", 0.8, 0, 0, 10, 10), det("person", 0.7, 50, 50, 60, 60)]
    ]
    assert agreement(reference, candidate).map50 == pytest.approx(2 / 3)
    # the right box with the wrong label finds nothing
    assert agreement(reference, [[det("dog", 0.9, 0, 0, 10, 10)]]).map50 == 0.0
    # a box overlapping less than IoU 0.5 is a miss
    assert agreement([[det("car", 0.9, 0, 0, 10, 10)]], [[det("car", 0.9, 6, 0, 16, 10)]]).map50 == 0.0


def test_each_reference_box_is_matched_once_and_empty_reference_is_undefined():
    reference = [[det("cat", 0.9, 0, 0, 10, 10)]]
    duplicates = [[det("cat", 0.9, 0, 0, 10, 10), det("cat", 0.8, 0, 0, 10, 10)]]
    assert agreement(reference, duplicates).map50 == pytest.approx(1.0)  # the duplicate comes after full recall
    assert agreement([[]], [[det("cat", 0.9, 0, 0, 1, 1)]]).map50 is None
    with pytest.raises(ValueError):
        agreement([[]], [])


def test_classes_seen_a_few_times_stay_out_of_the_headline_where_others_were_seen_often():
    """`edge bench` of an int8 model: people agreed, but three classes the reference saw once each (a bed, a sink, a
    pair of skis) were missed, and the class mean said 0.56 where the conversion's own table said 0.99. The
    headline counts the classes seen ENOUGH_BOXES times where there are any; each class is still listed."""
    people = [[det("person", 0.9, 10 * i, 0, 10 * i + 8, 8)] for i in range(ENOUGH_BOXES)]
    rare = [[det(label, 0.9, 0, 50, 10, 60)] for label in ("bed", "sink", "skis")]
    missed = [[det("person", 0.9, 10 * i, 0, 10 * i + 8, 8)] for i in range(ENOUGH_BOXES)] + [[], [], []]
    result = agreement(people + rare, missed)
    assert result.map50 == pytest.approx(1.0) and result.map50_every_class == pytest.approx(0.25)
    assert result.per_class["bed"] == 0.0 and result.to_dict()["classes_with_enough_boxes"] == ["person"]
    # a short comparison where no class was seen that often: every class counts, as before
    few = agreement(people[:2] + rare, [*missed[:2], [], [], []])
    assert (
        few.map50 == few.map50_every_class == pytest.approx(0.25) and few.to_dict()["classes_with_enough_boxes"] == []
    )
