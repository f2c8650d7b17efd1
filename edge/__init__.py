"""Edge inference runtime: frame sources, detector pipeline, timings, configuration and CLI."""
