"""Shared test configuration: hypothesis profiles and the real tokenizer cache.

``ci`` (loaded when ``CI`` is set) runs 1,000 examples per core property;
``dev`` (the default) runs a quick sample. Plugin-level properties drive a
real ADK Runner per example and cap themselves lower (see ``strategies``).
"""

from __future__ import annotations

import os

_SHARED_CACHE = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "tiktoken-cache")
if "TIKTOKEN_CACHE_DIR" not in os.environ and os.path.isdir(_SHARED_CACHE):
  os.environ["TIKTOKEN_CACHE_DIR"] = os.path.abspath(_SHARED_CACHE)

from hypothesis import HealthCheck, settings  # noqa: E402

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]

settings.register_profile("ci", max_examples=1000, deadline=None, suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=_SLOW_OK)
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if IN_CI else "dev"))
