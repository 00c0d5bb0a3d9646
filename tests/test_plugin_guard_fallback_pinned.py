"""The minimal safe pack keeps pending calls, through a real Runner.

When the validity guard rejects the rewritten request, the plugin sends the
smallest safe pack. It kept only the current invocation's contents, so a
long-running call still pending from an earlier turn (never to be dropped)
left the request.
"""

from __future__ import annotations

from aether_frame.adk import plugin as plugin_mod
from aether_frame.adk.guard import GuardResult, check_request
from aether_frame.adk.plugin import ContextPackPlugin
from tests.adk_support import manifests, say
from tests.test_plugin_pending import _has_call, alpha_done_beta_pending


async def test_the_minimal_pack_keeps_a_pending_call_and_the_turn_that_asked_for_it(monkeypatch):
  plugin = ContextPackPlugin(window=100_000)
  runner, session, model, recorder = await alpha_done_beta_pending(plugin)
  forced = {"n": 0}

  def reject_first(*args, **kwargs):  # the packed request is rejected; the minimal one is checked for real
    forced["n"] += 1
    if forced["n"] == 1:
      return GuardResult(ok=False, problems=["forced by the test"], tokens=0)
    return check_request(*args, **kwargs)

  monkeypatch.setattr(plugin_mod, "check_request", reject_first)
  await say(runner, session.id, "meanwhile, what's 2+2?")
  orig, sent = recorder.requests[-1], model.received[-1]
  guard = (await manifests(runner, session.id))[-1]["runtime"]["guard"]
  assert _has_call(orig.contents, "long_job", {"x": "beta"}), "the original request must hold the pending call"
  assert _has_call(sent.contents, "long_job", {"x": "beta"}), "the minimal pack dropped the pending call"
  assert not _has_call(sent.contents, "long_job", {"x": "alpha"}), "a finished call is not kept by the minimal pack"
  texts = [p.text for c in sent.contents for p in c.parts or () if p.text]
  assert texts[0] == "start job beta" and sent.contents[0].role == "user", texts[:2]
  assert forced["n"] == 2 and guard["fallback"] and guard["fallback_problems"] == [], guard
  assert guard["fallback_tokens"] > 0 and plugin.faults == 0
