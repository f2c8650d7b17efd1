"""Runtime failures the user can act on (images, sources, configuration)."""


class EdgeError(RuntimeError):
    """The message says what went wrong and what to do; no traceback is shown for these."""
