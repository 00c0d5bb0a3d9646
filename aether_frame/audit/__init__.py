"""Manifest audit tools: replayable inputs, spool, replay, diff and the HTML report.

Everything here reads what ``ManifestWriter`` stored through an ADK
ArtifactService (GCS in production, a folder locally), so an old call can be
rebuilt and explained long after the run.
"""
