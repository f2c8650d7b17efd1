"""Runtime failures the user can act on (images, sources, configuration)."""


class EdgeError(RuntimeError):
    """The message says what went wrong and what to do; no traceback is shown for these."""


def needs_events_extra(what: str, exc: ImportError) -> EdgeError:
    """Tracking, events and MQTT are an optional extra; without it, say how to install it."""
    return EdgeError(
        f"{what} needs the events extra ({exc.name or exc} is missing): pip install 'edge-inference[events]'"
    )
