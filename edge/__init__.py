"""Edge inference runtime: frame sources, detector pipeline, timings, configuration and CLI."""

__version__ = "0.1.0"
