"""The pure compiler core: candidates + policy + window in, pack + manifest out.

Nothing in this package imports ADK or performs I/O, so it can be replayed,
benchmarked and property-tested in isolation.
"""
