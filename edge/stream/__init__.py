"""One stream: a frame's way from its source through the detector and the tracker to a published result.

May import edge.detection and edge's shared modules; never the event layer, the runtime or the tools above it.
"""
