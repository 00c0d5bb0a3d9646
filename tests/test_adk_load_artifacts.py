"""ADK's ``load_artifacts`` tool next to the plugin, through a real Runner.

The tool tells the model every artifact of the session, and the plugin's
manifests are artifacts of the session: the model was offered
``context_pack/manifest.json`` first, and loaded a few KB of pack ids and
hashes as if they were the user's data. The listing the model sees must be the
one ADK writes when the manifests live elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from google.adk.artifacts import InMemoryArtifactService
from google.adk.features import FeatureName
from google.adk.features._feature_registry import temporary_feature_override
from google.adk.tools.load_artifacts_tool import load_artifacts_tool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from aether_frame.adk.manifest_store import MANIFEST_FILENAME, ManifestWriter
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.offline_model import OfflineLlm, tool_call
from tests.adk_support import USER, agent, make_runner, manifests, new_session, say

LISTING = re.compile(r"You have a list of artifacts:\s*(\[.*?\])", re.S)
TURNS = ["hello", "save the Q3 report", "what do the artifacts say?", "load all the artifacts"]


async def save_report(text: str, tool_context: ToolContext) -> dict:
  """Saves a report."""
  await tool_context.save_artifact("report.txt", types.Part(text=text))
  return {"saved": "report.txt"}


def _all_text(request) -> str:
  return (request.config.system_instruction or "") + "".join(p.text or "" for c in request.contents for p in c.parts or ())


def _reply(request):
  if any(p.function_response for c in request.contents[-3:] for p in c.parts or ()):
    return "ok, done."  # the loaded artifacts (and a routed instruction) come after the response
  said = _all_text(request).rsplit("USER REQUEST (VERBATIM):", 1)[-1]
  if "save the Q3 report" in said:
    return tool_call("save_report", {"text": "Q3 revenue grew 12%."})
  if "load all the artifacts" in said:  # a model does as told: it loads every listed artifact
    found = LISTING.search(_all_text(request))
    return tool_call("load_artifacts", {"artifact_names": json.loads(found.group(1)) if found else []})
  return "Answer."


async def _run(writer=None):
  model = OfflineLlm(default=_reply)
  plugin = ContextPackPlugin(window=32_000, **({"manifest_writer": writer} if writer else {}))
  runner = make_runner(agent(model=model, tools=[save_report, load_artifacts_tool])[0], [plugin])
  s = await new_session(runner)
  for text in TURNS:
    await say(runner, s.id, text)
  return model, plugin, runner, s


def test_the_model_is_offered_and_loads_only_the_users_artifacts():
  async def go():
    model, plugin, runner, s = await _run()
    assert plugin.faults == 0
    assert len(await manifests(runner, s.id)) == len(model.received)  # the manifests are in the session's store
    offered = [LISTING.search(_all_text(r)) for r in model.received]
    assert offered[0] is None and offered[1] is None  # only manifests so far: no listing, as ADK without them
    later = [json.loads(m.group(1)) for m in offered[2:] if m]
    assert later and len(later) == len(offered) - 2 and all(names == ["report.txt"] for names in later)
    last = _all_text(model.received[-1])
    assert "Artifact report.txt is:" in last and "Q3 revenue grew 12%." in last
    assert MANIFEST_FILENAME not in last and "pack_id" not in last
  asyncio.run(go())


def test_the_instructions_equal_those_of_manifests_kept_in_another_store():
  """With the manifests in a store ADK does not list, ADK writes the listing we must send: byte for byte."""
  async def go():
    mine, _, _, _ = await _run()
    apart, _, _, _ = await _run(ManifestWriter(service=InMemoryArtifactService()))
    assert len(mine.received) == len(apart.received) == 6
    assert [r.config.system_instruction for r in mine.received] == [r.config.system_instruction for r in apart.received]
  asyncio.run(go())


def _not_pack(request) -> list[dict]:
  return [c.model_dump(mode="json") for c in request.contents
          if not any((p.text or "").startswith("CONTEXT PACK v1") for p in c.parts or ())]


def test_a_routed_listing_is_cleaned_in_its_instruction_content():
  """ADK's experimental dynamic-instruction routing sends the listing as a labelled user content:
  it must hold what ADK writes without our manifests, and go when it held only those."""
  async def go():
    with temporary_feature_override(FeatureName.DYNAMIC_INSTRUCTION_ROUTING, True):
      mine, plugin, _, _ = await _run()
      apart, _, _, _ = await _run(ManifestWriter(service=InMemoryArtifactService()))
    assert plugin.faults == 0
    routed = [r for r in mine.received if any("You have a list of artifacts" in (p.text or "")
                                              for c in r.contents for p in c.parts or ())]
    assert routed, "ADK no longer routes the listing into contents: this test checks nothing"
    assert len(mine.received) == len(apart.received) == 6
    assert [_not_pack(r) for r in mine.received] == [_not_pack(r) for r in apart.received]
    assert [r.config.system_instruction for r in mine.received] == [r.config.system_instruction for r in apart.received]
  asyncio.run(go())


@pytest.mark.parametrize("names, kept", [
    (["context_pack/manifest.json", "report.txt"], ["report.txt"]),
    (["a]\"b.txt", "context_pack/manifest.json"], ["a]\"b.txt"]),
])
def test_listing_edit_rebuilds_adks_own_text(names, kept):
  from aether_frame.adk import artifact_listing as al

  async def go():
    own = lambda n: n.startswith("context_pack/")  # noqa: E731
    edit = await al.listing_edit(names, own)
    full, reduced = await al.listing_text(names), await al.listing_text(kept)
    assert edit is not None and reduced is not None
    system = "Be brief.\n\n" + full
    assert edit.system(system) == "Be brief.\n\n" + reduced
    assert edit.system("Be brief.") == "Be brief."  # not there: unchanged
    assert await al.listing_edit(kept, own) is None  # nothing of ours: nothing to do
    only_ours = await al.listing_edit(["context_pack/manifest.json"], own)
    assert only_ours.system("Be brief.\n\n" + await al.listing_text(["context_pack/manifest.json"])) == "Be brief."
  asyncio.run(go())


class _CountingStore(InMemoryArtifactService):
  """Counts the session listings (ADK's and the plugin's)."""

  listings: int = 0

  async def list_artifact_keys(self, **kwargs):
    self.listings += 1
    return await super().list_artifact_keys(**kwargs)


@pytest.mark.parametrize("include_artifacts", [True, False])
def test_the_plugin_lists_the_session_once_per_call(include_artifacts):
  async def go():
    store = _CountingStore()
    plugins = [ContextPackPlugin(window=32_000, include_artifacts=include_artifacts)]
    model = OfflineLlm(default=_reply)
    runner = make_runner(agent(model=model, tools=[save_report, load_artifacts_tool])[0], plugins, artifact_service=store)
    s = await new_session(runner)
    for text in TURNS:
      await say(runner, s.id, text)
    calls = len(model.received)
    assert store.listings == 2 * calls  # load_artifacts' own listing, then ours (was 3 per call)
  asyncio.run(go())


def test_manifests_under_a_file_name_of_ones_own_are_hidden_too():
  async def go():
    model, plugin, runner, s = await _run(ManifestWriter("audit/manifest.json"))
    names = await runner.artifact_service.list_artifact_keys(app_name=runner.app_name, user_id=USER, session_id=s.id)
    assert "audit/manifest.json" in names and plugin.faults == 0
    for request in model.received:
      text = _all_text(request)
      assert "audit/manifest.json" not in text
    assert json.loads(LISTING.search(_all_text(model.received[-1])).group(1)) == ["report.txt"]
  asyncio.run(go())
