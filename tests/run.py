#!/usr/bin/env python3
"""The whole suite, every tier, as CI runs it (`.ci/run` is this command): what it needs installed first, then
`pytest -m 'not minutes'`, then how long it all took.

    python3 tests/run.py                 every tier (in-process, process, system)
    python3 tests/run.py -k mqtt -x      more pytest arguments after it

- Debian's programs the process and system tiers drive for real (chromium, mosquitto, nginx, ffmpeg, GStreamer's
  RTSP server, the venv module of Debian's Python) are installed with apt-get where this runs as root on Debian;
  elsewhere one line names what is missing and how to install it, and the tests that need it skip.
- The project with its test extra is installed into this Python; where that Python refuses (PEP 668: Debian's and
  Raspberry Pi OS' own), into a venv `.venv` in the checkout, which then runs the suite.

A plain `python3 -m pytest` runs the in-process tier alone (a couple of minutes); CONTRIBUTING in the docs says
what each tier needs and takes. Only the standard library here: it runs before anything is installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
# What the process and system tiers run, and how to tell each is here.
DEBIAN_PACKAGES = {
    "chromium": lambda: shutil.which("chromium") is not None,
    "mosquitto": lambda: Path("/usr/sbin/mosquitto").exists(),
    "nginx": lambda: Path("/usr/sbin/nginx").exists(),
    "ffmpeg": lambda: shutil.which("ffmpeg") is not None,
    "python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-good gstreamer1.0-plugins-ugly "
    "gstreamer1.0-libav": lambda: bool(glob.glob("/usr/lib/*/girepository-1.0/GstRtspServer-1.0.typelib")),
    "python3.11-venv": lambda: Path("/usr/lib/python3.11/ensurepip/__init__.py").exists(),
}


def say(line: str) -> None:
    print(f"tests/run.py: {line}", flush=True)


def system_packages() -> None:
    missing = [package for package, present in DEBIAN_PACKAGES.items() if not present()]
    if not missing:
        return
    wanted = " ".join(missing)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        why = "not root" if shutil.which("apt-get") else "no apt-get (not Debian)"
        say(f"{why}: the tests that drive {wanted} will skip; as root on Debian: apt-get install {wanted}")
        return
    say(f"installing Debian's {wanted}")
    quiet = {"stdout": subprocess.DEVNULL, "env": {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}}
    done = subprocess.run(["apt-get", "update", "-qq"], check=False, **quiet)  # type: ignore[call-overload]
    if done.returncode == 0:
        done = subprocess.run(["apt-get", "install", "-y", "-qq", *wanted.split()], check=False, **quiet)  # type: ignore[call-overload]
    if done.returncode != 0:
        say(f"apt-get could not install {wanted} (exit {done.returncode}): the tests that drive them will skip")


def python_with_the_project() -> str:
    """This Python, or the checkout's venv where this one is managed by the system, with `.[test]` installed."""
    python = sys.executable
    if (VENV / "bin" / "python").exists():
        python = str(VENV / "bin" / "python")
    install = [python, "-m", "pip", "install", "--quiet", "-e", ".[test]"]
    done = subprocess.run(install, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0 and "externally-managed-environment" in done.stderr and python == sys.executable:
        say(f"{python} is managed by the system (PEP 668): installing into a venv, {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        python = str(VENV / "bin" / "python")
        install[0] = python
        done = subprocess.run(install, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        say(f"pip could not install the project with its test extra (exit {done.returncode}): see above")
        sys.exit(done.returncode)
    return python


def main() -> int:
    started = time.monotonic()
    system_packages()
    python = python_with_the_project()
    installed = time.monotonic()
    tests = subprocess.run([python, "-m", "pytest", "-q", "-m", "not minutes", *sys.argv[1:]], cwd=REPO, check=False)
    ended = time.monotonic()
    say(
        f"the suite took {ended - installed:.0f} s, {ended - started:.0f} s with the installs "
        f"(pytest's exit status {tests.returncode})"
    )
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
