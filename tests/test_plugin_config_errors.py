"""Configuration errors fail at construction, naming the argument.

Each of these used to be accepted (or to fail with a bare AttributeError), and
then made every model call fail open or fault: a run without packs or
manifests, noticed late if at all.
"""

from __future__ import annotations

import pytest

from aether_frame.adk.manifest_store import ManifestWriter
from aether_frame.adk.plugin import ContextPackPlugin, context_pack_callbacks
from aether_frame.core.windows import ModelWindows


@pytest.mark.parametrize("kwargs, error, needle", [
    ({"agent_policies": ["not", "a", "mapping"]}, TypeError, "agent_policies must be a mapping"),
    ({"agent_policies": "planner"}, TypeError, "agent_policies must be a mapping"),
    ({"policy": "quality_first"}, TypeError, r"policy must be a PackPolicy, got str 'quality_first' \(a preset: "
                                             r"PackPolicy.preset\('quality_first'\)\)"),
    ({"policy": "fast"}, TypeError, r"policy must be a PackPolicy, got str 'fast'$"),
    ({"policy": {"profile": "research"}}, TypeError, r"got dict \(fields: PackPolicy\(\*\*...\)"),
    ({"agent_policies": {"planner": "cost_first"}}, TypeError,
     r"agent_policies\['planner'\] must be a PackPolicy, got str 'cost_first' \(a preset"),
    ({"window_overrides": [("m", 10)]}, TypeError, "window_overrides must be a mapping"),
    ({"window_overrides": "m=10"}, TypeError, "window_overrides must be a mapping"),
    ({"window_overrides": {1: 100}}, ValueError, "window_overrides keys must be model names"),
    ({"window_overrides": {"m": True}}, ValueError, "window for model 'm' must be a positive int"),
    ({"window": True}, ValueError, "window must be a positive int"),
    ({"window": 2**41}, ValueError, "window must be a positive int of at most 2\\*\\*40 tokens"),
    ({"window_overrides": {"m": 10**309}}, ValueError, "window for model 'm' must be a positive int of at most"),
    ({"counter": "tiktoken"}, TypeError, "counter must be a TokenCounter"),
    # Methods alone passed, then every call faulted on counter.name (sent unpacked).
    ({"counter": type("WordCounter", (), {"count": lambda s, t: len(t.split()), "describe": lambda s: {},
                                           "count_many": lambda s, ts: [len(t.split()) for t in ts]})()},
     TypeError, "WordCounter has no name, exact, version"),
    ({"manifest_writer": "gs://bucket"}, TypeError, "manifest_writer must be a ManifestWriter"),
    ({"include_artifacts": "no"}, TypeError, "include_artifacts must be True or False"),
    ({"artifact_list_timeout": float("nan")}, ValueError, "artifact_list_timeout must be a positive number"),
    ({"artifact_list_timeout": "2"}, ValueError, "artifact_list_timeout must be a positive number"),
    ({"artifact_list_timeout": None}, ValueError, "artifact_list_timeout must be a positive number"),
    ({"artifact_list_timeout": 0}, ValueError, "artifact_list_timeout must be a positive number"),
    ({"ranker": object()}, TypeError, "ranker must be a Ranker with a rank"),
    ({"history_index_factory": 5}, TypeError, "history_index_factory must be a callable"),
    ({"working_memory": object()}, TypeError, "working_memory must have an async list_notes"),
    ({"name": None}, ValueError, "name must be a non-empty string"),
    ({"name": "  "}, ValueError, "name must be a non-empty string"),
])
def test_plugin_arguments(kwargs, error, needle):
  with pytest.raises(error, match=needle):
    ContextPackPlugin(**kwargs)
  with pytest.raises(error, match=needle):
    context_pack_callbacks(**kwargs)


@pytest.mark.parametrize("kwargs, needle", [
    ({"timeout": 0}, "timeout must be a positive number"),
    ({"timeout": -1}, "timeout must be a positive number"),
    ({"timeout": float("nan")}, "timeout must be a positive number"),
    ({"timeout": "5"}, "timeout must be a positive number"),
    ({"refresh_after": -1.0}, "refresh_after must be a non-negative number"),
    ({"refresh_after": float("inf")}, "refresh_after must be a non-negative number"),
    ({"max_held": 0}, "max_held must be an int >= 1"),
    ({"max_held": 2.5}, "max_held must be an int >= 1"),
    ({"chunk_size": 1}, "chunk_size must be an int >= 2"),
    ({"filename": ""}, "filename must name an artifact"),
    ({"blob_app": " "}, "blob_app must be a non-empty app name"),
])
def test_manifest_writer_arguments(kwargs, needle):
  with pytest.raises(ValueError, match=needle):
    ManifestWriter(spool_dir=False, **kwargs)


def test_store_inputs_must_be_a_bool():
  with pytest.raises(TypeError, match="store_inputs must be True or False"):
    ManifestWriter(spool_dir=False, store_inputs="no")


def test_valid_arguments_still_construct():
  ContextPackPlugin(window=8_192, window_overrides={"my-model": 65_536}, artifact_list_timeout=0.5, include_artifacts=False,
                    manifest_writer=ManifestWriter(spool_dir=False, refresh_after=0.0, timeout=1))
  assert ModelWindows({"my-model": 65_536}).lookup("my-model") == 65_536
