"""The audit tools on the store ADK's own CLI writes (``adk web``, ``adk run``, ``adk api_server``).

By default ADK's CLI gives every app its own ``<agents>/<app>/.adk/artifacts``
store, so the plugin's input blobs (saved under their own app name) land in
``<agents>/context-pack-blobs/.adk/artifacts``, beside the manifests' store:
``replay``, ``diff`` and ``report`` refused every call as missing its inputs,
and ``--blobs`` was ignored for a folder.
"""

from __future__ import annotations

import asyncio
import shutil

from google.adk.cli.utils.local_storage import PerAgentFileArtifactService

from aether_frame import cli
from aether_frame.adk.plugin import ContextPackPlugin
from tests.adk_support import agent, make_runner, new_session, say


def _adk_cli_store(tmp_path):
  agents = tmp_path / "agents"
  (agents / "testapp").mkdir(parents=True)
  runner = make_runner(agent()[0], [ContextPackPlugin(window=8_000)],
                       artifact_service=PerAgentFileArtifactService(agents_root=agents))

  async def go():
    s = await new_session(runner)
    for text in ("hello", "tell me more", "and then?"):
      await say(runner, s.id, text)
  asyncio.run(go())
  return agents


def test_replay_finds_the_blobs_beside_the_apps_store(tmp_path, capsys):
  agents = _adk_cli_store(tmp_path)
  store = agents / "testapp" / ".adk" / "artifacts"
  assert (agents / "context-pack-blobs" / ".adk" / "artifacts").is_dir()  # ADK's routing, not ours
  assert cli.main(["replay", "-q", str(store)]) == 0
  assert "3 calls: 3 identical" in capsys.readouterr().out
  session = next((store / "apps" / "testapp" / "users").glob("*/sessions/*"))
  assert cli.main(["diff", f"{session}@0", f"{session}@2"]) == 0


def test_blobs_names_a_blob_store_for_a_folder_too(tmp_path, capsys):
  agents = _adk_cli_store(tmp_path)
  moved = tmp_path / "elsewhere"
  shutil.move(str(agents / "context-pack-blobs" / ".adk" / "artifacts"), str(moved))
  store = agents / "testapp" / ".adk" / "artifacts"
  assert cli.main(["replay", "-q", str(store)]) == 2  # the blobs are gone from beside it: refused, by name
  assert "missing" in capsys.readouterr().out
  assert cli.main(["replay", "-q", str(store), "--blobs", str(moved)]) == 0
  assert "3 calls: 3 identical" in capsys.readouterr().out


def test_a_lone_manifest_file_and_a_symlinked_dot_adk_find_them_too(tmp_path, capsys):
  agents = _adk_cli_store(tmp_path)
  store = agents / "testapp" / ".adk" / "artifacts"
  versions = sorted(store.glob("apps/testapp/users/*/sessions/*/artifacts/context_pack/manifest.json/versions/*/manifest.json"))
  assert len(versions) == 3
  assert cli.main(["replay", "-q", str(versions[-1])]) == 0
  assert "1 calls: 1 identical" in capsys.readouterr().out
  assert cli.main(["diff", str(versions[0]), str(versions[2])]) == 0
  # ADK writes through a symlinked .adk folder; resolving the path must not lose the sibling.
  real = tmp_path / "testapp-adk"
  shutil.move(str(agents / "testapp" / ".adk"), str(real))
  (agents / "testapp" / ".adk").symlink_to(real, target_is_directory=True)
  assert cli.main(["replay", "-q", str(store)]) == 0
  assert "3 calls: 3 identical" in capsys.readouterr().out


def test_a_session_id_that_ends_like_a_version_prints_as_a_working_location():
  from aether_frame.audit.source import SessionRef, split_version

  label = SessionRef("app", "alice@example.com", "job@3").label()
  assert label == "app/alice@example.com/job%403"  # "job@3" would read as version 3 of session "job"
  assert split_version(f"gs://bucket/{label}") == (f"gs://bucket/{label}", None)
  assert split_version(f"gs://bucket/{label}@1") == (f"gs://bucket/{label}", 1)
