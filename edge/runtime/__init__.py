"""Everything a config runs: all its streams and compare groups, the watchdog, health, the service's snapshots.

May import edge.events, edge.stream, edge.detection and the shared modules; never edge.tools.
"""
