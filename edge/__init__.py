"""The runtime under the service: one sub-package per subsystem, and the few modules they all share.

detection (a loaded model) <- stream (one camera) <- events <- runtime | tools; config, settings, secrets and errors
are shared by all. Import-linter holds that order (pyproject.toml; ARCHITECTURE.md draws it).
"""
