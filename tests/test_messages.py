"""Messages read whole: no note, reason or line a user reads ends in the middle of a sentence.

Seen cut: every auto note ("...but the rounds of onnx overlap its"), the Edge TPU's install advice (cut at 200
characters), "openvino its inferences take", "1 pairs". Each kind is checked here as a rule: the message texts in the
code, the one way a long engine error is shortened, and the notes built from figures, rendered for every branch.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from edge_inference.backends import brief
from edge_inference.backends.base import BRIEF_LIMIT
from edge_inference.backends.edgetpu_backend import INSTALL_LIBEDGETPU, NO_DEVICE
from edge_inference.edge.detection.auto.choice import AutoChoice, live_check
from edge_inference.edge.detection.auto.figures import Measurement, certainty
from edge_inference.edge.errors import counted
from tests.conftest import REPO

# Words no finished sentence ends on; a text ending so was cut (or is a fragment continued by what follows it)
DANGLING = {"its", "the", "a", "an", "of", "and", "or", "but", "than", "their", "with", "to", "by", "from", "into"}
PACKAGES = ("backends", "cli", "edge", "models", "service")


def _ends_cut(text: str) -> bool:
    """Ends on one of those words, with no stop after it ("...it begins with." is a finished sentence)."""
    words = re.findall(r"[A-Za-z']+", text)
    return bool(words) and text[-1:].isalpha() and words[-1].lower() in DANGLING


def _message_texts() -> list[tuple[str, str]]:
    """Every string and f-string in the code whose last piece is text (not a value put in): (where, its end)."""
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[-1], ast.Constant):
                    text = str(node.values[-1].value)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    text = node.value
                else:
                    continue
                if " " in text.strip():
                    found.append((f"{path.relative_to(REPO)}:{node.lineno}", text))
    return found


def test_no_message_in_the_code_ends_mid_sentence():
    """A text that ends on "its", "the", "and" ... and is not followed by anything is a sentence cut short."""
    cut = [f"{where}: ...{text[-50:]!r}" for where, text in _message_texts() if _ends_cut(text)]
    assert cut == [], "\n".join(cut)


def test_the_scan_finds_a_cut_sentence():
    """The rule above catches the note that was seen cut."""
    assert _ends_cut("likely: onnx is ahead in its best round, but the rounds of tflite overlap its")
    assert not _ends_cut("the camera is on") and not _ends_cut("a fragment continued by ")


@given(st.text(st.characters(blacklist_categories=["Cs"]), max_size=2000), st.integers(40, 700))
@example("0" * 41, 40)  # one word past the limit: found by a random run
def test_a_long_engine_error_is_shortened_at_a_clause_and_says_so(text: str, limit: int):
    """An engine's own error can run to kilobytes: one line, within the limit, whole where it fits; where it does
    not, it ends on a clause or word boundary of the original, marked as cut."""
    shown = brief(text, limit)
    first = text.strip().split("\n", 1)[0].strip()
    assert "\n" not in shown and len(shown) <= max(limit, len(" (...)"))
    if len(first) <= limit:
        assert shown == first
        return
    assert shown.endswith(" (...)")
    kept = shown.removesuffix(" (...)")
    assert first.startswith(kept)
    following = first[len(kept) : len(kept) + 1]
    # a first word longer than the limit has no boundary to end at: it is cut, the only way to shorten it
    one_word = not any(mark in first[: limit - len(" (...)")] for mark in " ;.:,")
    assert following in ("", " ", ";", ".", ":", ",") or kept == "" or one_word, (kept[-20:], first[len(kept) :][:20])


def test_the_longest_advice_is_never_shortened():
    """The Edge TPU runtime's install advice, behind what auto's child and the engines put before it, is whole."""
    for advice in (INSTALL_LIBEDGETPU, NO_DEVICE):
        said = f"edgetpu (usb): libedgetpu.so.1 is not installed: {advice}"
        assert len(said) <= BRIEF_LIMIT and brief(said) == said


def _timed(backend: str, rounds: list[float], cpu_ms: float) -> Measurement:
    return Measurement(backend, "cpu", "m", 1000 / sorted(rounds)[1], None, rounds, cpu_ms)


def test_every_note_auto_writes_is_whole():
    """Each of certainty's branches, and the live check's reason, rendered and read to the end."""
    sure = [_timed("onnx", [100.0, 101.0, 99.0], 30.0), _timed("tflite", [60.0, 61.0, 59.0], 20.0)]
    close = [_timed("onnx", [100.0, 101.0, 99.0], 30.0), _timed("openvino", [98.5, 99.0, 98.0], 15.0)]
    likely = [_timed("onnx", [100.0, 90.0, 80.0], 30.0), _timed("openvino", [85.0, 84.0, 83.0], 25.0)]
    alone = [_timed("onnx", [100.0, 101.0, 99.0], 30.0)]
    older = [Measurement("onnx", "cpu", "m", 10.0, None), Measurement("openvino", "cpu", "m", 20.0, None)]
    notes = [certainty(results) for results in (sure, close, likely, alone, older, [])]
    assert [note.split(":")[0].split()[0] for note in notes[:3]] == ["sure", "close", "likely"]
    assert notes[2] == "likely: onnx is ahead in its best round, but openvino's best round beat onnx's slowest"
    choice = AutoChoice("tflite", "cpu", "m", "", key="k", timing=sure[1])
    notes.append(f"tflite's {live_check(choice, 30.0, 10.0)}")
    for note in notes:
        assert not _ends_cut(note) and " its inferences" not in note, note


def test_counts_agree_with_their_nouns():
    assert [counted(n, "pair") for n in (0, 1, 2)] == ["0 pairs", "1 pair", "2 pairs"]
    assert counted(1, "match", "matches") == "1 match" and counted(3, "match", "matches") == "3 matches"


def test_no_count_in_the_code_is_put_before_a_plural_it_may_not_have():
    """`{len(x)} pairs` reads "1 pairs": counts of things that can be one go through `counted`."""
    pattern = re.compile(r"\{len\([^}]*\)\} [a-z]+s\b")
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for package in PACKAGES
        for path in sorted(Path(REPO / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == [], "\n".join(found)
