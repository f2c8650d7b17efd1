"""Model-side failures the user can act on."""


class ModelError(ValueError):
    """A model description, layout, label file, sidecar or registry problem; the message says what to do."""
