"""The manual: the site builds (`mkdocs build --strict`), the README stays a page, and every `edge ...` command line
the docs quote is one the command accepts (its sub-command and each flag)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from edge_inference.backends import engines
from edge_inference.cli.app import cli
from edge_inference.edge.config import ServiceConfig
from edge_inference.edge.tools.config_reference import _sections, field_comments

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MANUAL = [README, *sorted((REPO / "docs").rglob("*.md"))]
# `edge` as a program: `edge`, `~/edge/bin/edge`, `/opt/edge/bin/edge`, then its sub-command
COMMAND = re.compile(r"(?:^|(?<=[\s(]))(?:[~\w./-]*/)?edge\s+(?=[a-z])")


@pytest.mark.process
def test_the_site_builds_with_no_warning_and_documents_every_config_key(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reference = (site / "reference" / "configuration.html").read_text()
    for path, model in _sections(ServiceConfig, ""):
        for key in model.model_fields:
            assert f"<code>{key}</code>" in reference, f"{path}.{key} is missing from the configuration reference"
    for key, engine in engines().items():
        for option in engine.options.model_fields:
            assert f"<code>{option}</code>" in reference, f"engine option {key}.{option} is missing"
    assert (site / "search" / "search_index.js").exists() or (site / "search" / "search_index.json").exists()
    assert "fonts.googleapis.com" not in (site / "index.html").read_text()  # offline: no web fonts
    # nor a script from unpkg.com (Material's offline plugin asked it for its search worker's shim)
    pages = {page: page.read_text() for page in site.rglob("*.html")}
    assert not [page for page, text in pages.items() if "unpkg.com" in text or "//cdn" in text]
    architecture = pages[site / "development" / "architecture.html"]  # ARCHITECTURE.md, written at build time
    assert "Where to add" in architecture and "EventSink" in architecture
    nested = pages[site / "history" / "benchmarks.html"]
    assert (
        '<script src="../assets/iframe-worker-shim.js">' in nested and (site / "assets/iframe-worker-shim.js").exists()
    )


def test_the_manual_menu_holds_what_users_read_and_development_the_rest():
    """The figures' history and the code's map were in the user manual's menu, and ARCHITECTURE.md outside the site."""
    import yaml

    def pages(items: list) -> list[str]:
        found: list[str] = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            found += pages(value) if isinstance(value, list) else [value]
        return found

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    assert [next(iter(tab)) for tab in nav] == ["User manual", "Development"]
    manual, development = (pages(next(iter(tab.values()))) for tab in nav)
    assert not [page for page in manual if page.startswith(("history/", "development", "contributing"))], manual
    assert {"development/architecture.md", "history/benchmarks.md", "history/reliability.md"} <= set(development)
    shown = {str(path.relative_to(REPO / "docs")) for path in (REPO / "docs").rglob("*.md")}
    assert shown | {"development/architecture.md"} == set(manual + development)  # every page in one menu


def test_every_config_key_says_what_it_does():
    """The reference is written from the models' own comments: a key added without one would be a bare row."""
    bare = [
        f"{path}.{key}".lstrip(".")
        for path, model in _sections(ServiceConfig, "")
        for key in model.model_fields
        if not field_comments(model).get(key)
    ]
    assert not bare, f"config keys without a comment saying what they do: {bare}"


def test_the_readme_fits_a_screen_and_opens_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150
    fence = lines.index("```bash")
    assert fence < 10, "the two commands come first"
    run, test = lines[fence + 1], lines[fence + 2]
    assert lines[fence + 3] == "```"
    assert run.startswith("python3 -m pip install . && ") and " edge serve " in run
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert test == ci, ".ci/run must run exactly the README's test command"


def quoted_commands() -> Iterator[tuple[str, str]]:
    """Each `edge ...` command in a shell block or an inline code span of the manual, with where it is."""
    for page in MANUAL:
        text = page.read_text()
        where = page.relative_to(REPO).as_posix()
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S):
            joined = block.replace("\\\n", " ")
            for line in joined.splitlines():
                yield from ((where, command) for command in _commands_in(line))
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`([^`\n]+)`", prose):
            yield from ((where, command) for command in _commands_in(span))


def _commands_in(line: str) -> Iterator[str]:
    for match in COMMAND.finditer(line):
        rest = line[match.end() :]
        command = re.split(r"\s(?:&&|\|\||\||;)\s|\s#\s|\s{2,}#", rest)[0]
        yield command.strip()


@pytest.mark.parametrize("page", [*MANUAL, REPO / "BENCHMARKS.md"], ids=lambda page: page.name)
def test_each_pages_code_blocks_close(page):
    """A fence left open turns the rest of a page into code: its commands were then no longer checked here (eight
    of the benchmarks' history went unchecked once), and the page reads as one block."""
    fences = [number for number, line in enumerate(page.read_text().splitlines(), 1) if line.startswith("```")]
    assert len(fences) % 2 == 0, f"{page.name}: a code block opened on one of lines {fences[-3:]} is never closed"


def test_the_manual_quotes_commands_at_all():
    commands = [command for _, command in quoted_commands()]
    assert len(commands) > 50
    assert any(c.startswith("models convert") for c in commands) and any(c.startswith("serve ") for c in commands)


@pytest.mark.parametrize(("page", "command"), sorted(set(quoted_commands())))
def test_each_quoted_command_line_exists(page, command):
    words = shlex.split(command, comments=True)
    context = click.Context(cli, info_name="edge")
    group: click.Command = cli
    while isinstance(group, click.Group) and words and not words[0].startswith("-"):
        found = group.get_command(context, words[0])
        assert found is not None, f"{page}: `edge {command}`: no sub-command {words[0]!r}"
        group, words = found, words[1:]
    flags = {name for param in group.params for name in (*param.opts, *param.secondary_opts)}
    flags |= {"-h", "--help"}
    for word in words:
        if word.startswith("-") and not re.fullmatch(r"-\d[\d.]*", word):
            name = word.split("=", 1)[0]
            assert name in flags, f"{page}: `edge {command}`: {name} is not an option of `{group.name}`"
