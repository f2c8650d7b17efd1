"""A model loaded on an engine and run on a frame: the detector, choosing its engine and file, sharing it, threads.

May import backends, models and edge's shared modules (config, settings, secrets, errors); nothing of a stream.
"""
