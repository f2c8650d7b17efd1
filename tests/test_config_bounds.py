"""A config's memory is bounded whatever its shape: one 150 KB string holding `${HOME}`, aliased 9^4 times, took
`edge serve --config` to 1.06 GB (615 KB: 4.0 GB): the cap counted values, not bytes, and `${...}` makes a new
string at every place an alias puts it. Property: any shape of anchors, aliases, depth, size and references loads
or is refused in one line, and the loading's peak stays far below what the expansion would take."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from edge_inference.edge.config.base import ConfigError
from edge_inference.edge.config.loading import load_config

PEAK_BOUND = 96 * 2**20  # the text bound (8 MiB) built twice over, with room for YAML's and pydantic's own


def config_text(length: int, reference: bool, fan_out: int, depth: int) -> str:
    """`streams[0].source` holding a string of `length` aliased fan_out**depth times through nested lists."""
    value = "a" * max(0, length - 7) + ("${HOME}" if reference else "a" * min(7, length))
    lines = [f'x-levels:\n  - &l0 "{value}"']
    for level in range(1, depth + 1):
        lines.append(f"  - &l{level} [{', '.join([f'*l{level - 1}'] * fan_out)}]")
    lines.append(f"streams:\n  - id: cam\n    source: *l{depth}\n    model: yolox-nano")
    return "\n".join(lines) + "\n"


def peak_while_loading(path) -> tuple[int, str]:
    tracemalloc.start()
    try:
        try:
            load_config(path)
            said = ""
        except ConfigError as refused:
            said = str(refused)
        return tracemalloc.get_traced_memory()[1], said
    finally:
        tracemalloc.stop()


@settings(max_examples=20)
@given(  # the large ones drawn often: they are what a regression would let through
    length=st.one_of(st.sampled_from([5_000, 20_000]), st.integers(1, 20_000)),  # 20 KB x 9^4: 131 MB expanded
    reference=st.booleans(),
    fan_out=st.one_of(st.just(9), st.integers(1, 9)),
    depth=st.one_of(st.just(4), st.integers(0, 4)),
)
def test_any_shape_of_aliases_and_references_loads_in_bounded_memory_or_is_one_line(
    tmp_path_factory, length, reference, fan_out, depth
):
    path = tmp_path_factory.mktemp("config") / "streams.yaml"
    path.write_text(config_text(length, reference, fan_out, depth))
    peak, said = peak_while_loading(path)
    assert peak < PEAK_BOUND, f"loading took {peak / 2**20:.0f} MiB at its peak"
    assert "\n" not in said and "report it" not in said


def test_the_reported_config_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    path = tmp_path / "streams.yaml"
    path.write_text(config_text(150_000, True, 9, 4))
    peak, said = peak_while_loading(path)
    assert "MiB of text once its aliases (*name) are counted" in said, said
    assert peak < PEAK_BOUND
