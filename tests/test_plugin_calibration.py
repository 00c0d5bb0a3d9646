"""The calibration loop: the provider's prompt count corrects later budgets.

OfflineLlm reports ``prompt_token_count`` from cl100k_base (a different
tokenizer than our o200k_base), as Gemini reports its own count.
"""

from __future__ import annotations


from aether_frame import ContextPackPlugin
from aether_frame.adk.state_schema import CALIBRATION_KEY
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import APP, USER, agent, make_runner, manifests, new_session, say

TEXT = "Résumé of the 2025 numbers: 1,234,567.89 units; naïve café ☕ — ok? " * 6


async def test_ratio_is_learned_persisted_in_state_and_recorded_in_the_next_manifest():
  ag, model = agent(model=OfflineLlm(model="offline-model"))
  runner = make_runner(ag, [ContextPackPlugin(window=8192)])
  s = await new_session(runner)
  for i in range(4):
    await say(runner, s.id, f"turn {i}: {TEXT}")
  docs = await manifests(runner, s.id)
  assert len(docs) == 4
  session = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=s.id)
  cal = session.state[CALIBRATION_KEY]["models"]["offline-model"]
  assert cal["samples"] == 4
  # The first call had nothing to learn from; each later manifest records the
  # previous call's estimate and the provider's actual count.
  assert docs[0]["runtime"]["calibration"]["samples"] == 0
  for prev, nxt in zip(docs, docs[1:]):
    snap = nxt["runtime"]["calibration"]
    assert snap["last_estimate"] == prev["runtime"]["request_tokens_estimate"]
    assert snap["last_actual"] != snap["last_estimate"]  # cl100k disagrees with o200k on this text
  # The ratio learned so far (bounded, with margin) scales each call's budgets.
  assert 0.5 <= cal["ratio"] <= 3.0
  for m in docs[1:]:
    learned = m["runtime"]["calibration"]["ratio"]
    assert m["token_scale"] == round(max(learned, 1.0) * 1.05, 6)
  assert docs[0]["token_scale"] == 1.05


async def test_a_second_worker_uses_the_sessions_calibration():
  ag, _ = agent(model=OfflineLlm(model="offline-model"))
  runner = make_runner(ag, [ContextPackPlugin(window=8192)])
  s = await new_session(runner)
  for i in range(3):
    await say(runner, s.id, f"turn {i}: {TEXT}")
  first = (await manifests(runner, s.id))[-1]
  # A fresh plugin instance (another worker) on the same session and stores.
  ag2, _ = agent(model=OfflineLlm(model="offline-model"))
  runner2 = make_runner(ag2, [ContextPackPlugin(window=8192)], artifact_service=runner.artifact_service,
                        session_service=runner.session_service)
  await say(runner2, s.id, f"turn 3: {TEXT}")
  second = (await manifests(runner2, s.id))[-1]
  assert second["runtime"]["calibration"]["samples"] == 3
  # The second worker scales by the ratio the session learned, not the cold 1.0 (1.05 with margin).
  session = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=s.id)
  learned = second["runtime"]["calibration"]["ratio"]
  assert learned != 1.0 and second["token_scale"] == round(max(learned, 1.0) * 1.05, 6)
  assert session.state[CALIBRATION_KEY]["models"]["offline-model"]["samples"] == 4
  assert second["token_scale"] >= first["token_scale"]


async def test_inspect_and_the_demo_table_say_what_the_calibration_row_holds_back(tmp_path, capsys):
  """The row said 'the provider counts 1.050x ours' when no count had come back yet: the
  1.05 was the safety margin, which applies on every call, not a measured ratio."""
  import asyncio

  from google.adk.artifacts import FileArtifactService

  from aether_frame import cli
  from aether_frame.demo import format_table
  ag, _ = agent(model=OfflineLlm(default="ok"))
  runner = make_runner(ag, [ContextPackPlugin(window=8192)], artifact_service=FileArtifactService(root_dir=str(tmp_path)))
  s = await new_session(runner)
  for text in ("hi", "again"):
    await say(runner, s.id, text)
  first, second = await manifests(runner, s.id)
  assert first["runtime"]["calibration"]["samples"] == 0 and second["runtime"]["calibration"]["samples"] == 1
  assert "the safety margin alone (no provider count yet)" in format_table(first)
  ratio = second["runtime"]["calibration"]["ratio"]
  assert f"the provider counts {ratio:.3f}x ours (1 sample), plus the safety margin" in format_table(second)
  for version, expected in ((0, "margin alone"), (1, f"counts {ratio:.3f}x ours (1 sample)")):
    assert await asyncio.to_thread(cli.main, ["inspect", f"{tmp_path}@{version}"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("calibration"))
    assert expected in row, row
