"""The suite's tiers stay what they say: the guard (tests/tiers.py) fails a test that starts more than its marker
allows, with the marker it needs, and a run ends with each tier's count. Checked on a suite of its own, run by a
pytest in a process of its own."""

from __future__ import annotations

import shlex

import pytest
import tomllib

from tests.conftest import REPO

pytestmark = pytest.mark.process
pytest_plugins = ["pytester"]

SUITE = """
import socket
import subprocess
import sys
import threading

import pytest


def test_starts_nothing():
    assert sorted([3, 1, 2]) == [1, 2, 3]


def test_starts_a_process_unmarked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_opens_a_socket_from_a_thread_unmarked():
    def listen():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))

    thread = threading.Thread(target=listen)
    thread.start()
    thread.join()


@pytest.mark.process
def test_starts_a_process_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.process
def test_makes_a_venv_marked_process_only(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)


@pytest.mark.system
def test_makes_a_venv_marked_system(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
"""


def test_a_test_that_starts_more_than_its_marker_says_fails_with_the_marker_it_needs(pytester, monkeypatch):
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("EDGE_TIER_RECORD", raising=False)
    result = pytester.runpytest_subprocess("-p", "tests.tiers", "-p", "no:cacheprovider", "-p", "no:randomly")
    guard = "without its tier's marker: add @pytest.mark"
    result.stdout.fnmatch_lines_random(
        [
            f"*test_starts_a_process_unmarked started a process: *-c pass (process tier) {guard}.process*",
            f"*test_opens_a_socket_from_a_thread_unmarked started a network socket (socket.bind*{guard}.process*",
            f"*test_makes_a_venv_marked_process_only started a process: *-m venv* (system tier) {guard}.system*",
            "tiers: inprocess 2 error, 3 passed; process 1 error, 2 passed; system 1 passed",
        ]
    )
    assert result.parseoutcomes() == {"passed": 6, "errors": 3}


def test_a_plain_pytest_runs_the_in_process_tier_and_the_readmes_command_every_tier(pytester, monkeypatch):
    addopts = shlex.split(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    )
    plain = addopts[addopts.index("-m") + 1]
    runner = (REPO / "tests" / "run.py").read_text()
    assert '"-m", "not minutes"' in runner and (REPO / ".ci" / "run").read_text().strip().endswith("tests/run.py")
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    first = pytester.runpytest_subprocess("-p", "tests.tiers", "-m", plain, "-q")
    assert first.parseoutcomes()["deselected"] == 3  # the three marked ones: the in-process tier runs
    every = pytester.runpytest_subprocess("-p", "tests.tiers", "-m", "not minutes", "-q")
    assert "deselected" not in every.parseoutcomes()
