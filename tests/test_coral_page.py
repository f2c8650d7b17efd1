"""The Coral page's first block and the Edge TPU engine's install line install what the code knows to work: each pair
they name is checked against `KNOWN_PAIRS`, the table the engine's load check and `edge doctor` read."""

from __future__ import annotations

import re
from pathlib import Path

from edge_inference.backends.edgetpu_backend import ENGINE, INSTALL_LIBEDGETPU
from edge_inference.backends.edgetpu_runtime import BOOKWORM, KNOWN_PAIRS, pair_verdict

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "hardware" / "coral.md"
DEB = re.compile(r"(libedgetpu1-(?:std|max))_([^_\s]+?)\.(\w+)_\$ARCH\.deb")
WHEEL = re.compile(r"tflite_runtime-([\d.]+(?:\.post\d+)?)-cp\d+")


def first_block(page: Path) -> list[str]:
    return page.read_text().split("```bash\n", 1)[1].split("```", 1)[0].splitlines()


def test_the_pages_first_block_installs_a_known_good_pair():
    block = first_block(PAGE)
    assert block[: len(BOOKWORM.install)] == list(BOOKWORM.install)  # the table's commands, as the page shows them
    text = "\n".join(block)
    libraries, wheels = set(DEB.findall(text)), set(WHEEL.findall(text))
    assert len(libraries) == 1 and len(wheels) == 1, (libraries, wheels)
    (package, number, system), runtime = libraries.pop(), wheels.pop()
    verdict = pair_verdict(f"{package} {number}.{system}", f"tflite-runtime {runtime}")
    assert verdict.kind == "good", verdict
    assert "coral-edgetpu-stable" not in text  # Coral's own repository: its 16.0 crashes beside a newer runtime


def test_every_install_line_names_a_known_good_pair():
    """`edge backends`' install hint and the advice of a missing runtime name versions the table holds as one pair."""
    for line in (ENGINE.install, INSTALL_LIBEDGETPU):
        library = re.search(r"libedgetpu1-std (\S+)", line)
        runtime = re.search(r"tflite_runtime (\d[\w.]*\d)", line)
        assert library and runtime, line
        assert pair_verdict(f"libedgetpu1-std {library[1]}", f"tflite-runtime {runtime[1]}").kind == "good", line
        assert "docs/hardware/coral.md" in line


def test_each_system_the_page_names_has_its_pair_or_says_why_not():
    text = PAGE.read_text()
    for pair in KNOWN_PAIRS:
        assert pair.install or pair.why_not in " ".join(text.split()), pair.systems
        version = pair.libedgetpu
        assert f"libedgetpu1-std {version}`" in text and f"`tflite_runtime {pair.runtime.split()[1]}`" in text
