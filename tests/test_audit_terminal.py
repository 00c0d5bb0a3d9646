"""Client-chosen ids reach the operator's terminal and logs as text, not as control codes.

ADK's api_server lets a client choose its session and user ids. ``inspect``
printed a session id raw (an escape sequence cleared the screen and wrote a
fake "checksum ok"), and the manifest writer's log lines put a user id's line
break into a forged log record (security review).
"""

from __future__ import annotations

import asyncio
import logging

from google.adk.artifacts import FileArtifactService

from aether_frame import cli
from aether_frame.adk.manifest_store import _label
from aether_frame.adk.plugin import ContextPackPlugin
from aether_frame.audit.terminal import TerminalSafe, shown
from aether_frame.offline_model import OfflineLlm
from tests.adk_support import agent, make_runner, new_session, say

EVIL_SESSION = "s1\x1b[2J\x1b[H checksum ok\x1b]0;owned\x07\r\nINFO fake line"


async def test_inspect_prints_a_hostile_session_id_as_text(tmp_path, capsys):
  ag, _ = agent(model=OfflineLlm(default="ok"))
  runner = make_runner(ag, [ContextPackPlugin(window=8192)], artifact_service=FileArtifactService(root_dir=str(tmp_path)))
  await new_session(runner, session_id=EVIL_SESSION)
  await say(runner, EVIL_SESSION, "hi")
  assert await asyncio.to_thread(cli.main, ["inspect", str(tmp_path)]) == 0  # the CLI runs its own loop
  out = capsys.readouterr().out
  assert not any(c in out for c in "\x1b\x07\r"), repr(out[:300])
  lines = out.splitlines()
  assert lines[0].endswith("checksum ok") and "%1B[2J" in lines[0]
  assert lines[1].startswith("session s1\\x1b[2J") and "\\x0d\\x0aINFO fake line  agent" in lines[1]
  assert not any(line.startswith("INFO fake line") for line in lines)


def test_the_writers_log_label_keeps_a_hostile_id_on_its_line():
  label = _label({"app": "a", "user": "u\nERROR root: forged", "session": "s", "manifest": {"pack_id": "p"}})
  assert label == "a/u\\x0aERROR root: forged/s pack p"


def test_shown_and_the_safe_stream():
  assert shown("a\tb\nc\x1b[0m\x9b") == "a\\x09b\\x0ac\\x1b[0m\\x9b"
  assert shown(None) == "None" and shown("plain é 中") == "plain é 中"
  written = []

  class Sink:
    encoding = "utf-8"

    def write(self, text):
      written.append(text)

  stream = TerminalSafe(Sink())
  assert stream.write("row\tcell\n\x1b]0;t\x07") == len("row\tcell\n\x1b]0;t\x07")
  assert written == ["row\tcell\n\\x1b]0;t\\x07"] and stream.encoding == "utf-8"


def test_the_cli_restores_its_streams(capsys):
  import sys

  before = sys.stdout, sys.stderr
  try:
    cli.main(["inspect", "/nonexistent/folder"])
  except SystemExit:
    pass
  assert (sys.stdout, sys.stderr) == before
  logging.getLogger(__name__).debug("still usable")
