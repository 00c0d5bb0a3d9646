"""The CLI as a new user meets it: bad arguments, failed runs and Ctrl-C are one line and exit 2
(130 for Ctrl-C), never a traceback, and a failed demo leaves nothing half-written behind."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aether_frame import cli
from aether_frame.core.manifest import body_of, finalize
from aether_frame.demo import run_demo
from tests.fixtures.redis_server import free_port
from tests.cli_support import exit_2 as _exit_2, one_line as _one_line

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI")}
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
  env.update(extra)
  return env


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
  """``aether-frame ARGS`` as its own process: the exit status and stderr a shell sees."""
  return subprocess.run([sys.executable, "-m", "aether_frame.cli", *args], env=_env(**env),
                        capture_output=True, text=True, timeout=300)






@pytest.fixture(scope="module")
def demo_session(tmp_path_factory):
  """A short demo run: its session folder and its manifests (version, doc)."""
  out = tmp_path_factory.mktemp("demo") / "out"
  return asyncio.run(run_demo(out, turns=2))


# ------------------------------------------------------------------- --help
def test_help_documents_the_exit_codes(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  assert "exit status" in out
  for code in ("0", "1", "2", "130", "141"):
    assert re.search(rf"^\s+{code}\s+\S", out, re.M), out


# --------------------------------------------------------------------- demo
@pytest.mark.parametrize("args, says", [
    (["--window", "0"], "--window"),
    (["--window", "-5"], "--window"),
    (["--turns", "0"], "--turns"),
    (["--turns", "-3"], "--turns"),
    (["--model", "foo-bar"], "foo-bar"),
    (["--model", "gemini-2.5-flash"], "GOOGLE_API_KEY"),
])
def test_demo_bad_arguments_are_one_line_exit_2_and_write_nothing(tmp_path, capsys, monkeypatch, args, says):
  for var in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
    monkeypatch.delenv(var, raising=False)
  out = tmp_path / "demo"
  assert says in _exit_2(capsys, ["demo", "--out", str(out), *args])
  assert not out.exists()


@pytest.mark.parametrize("where", ["a-file", "a-file/below"])
def test_demo_out_that_cannot_be_a_folder_is_one_line_exit_2(tmp_path, capsys, where):
  (tmp_path / "a-file").write_text("not a folder")
  assert str(tmp_path / "a-file") in _exit_2(capsys, ["demo", "--out", str(tmp_path / where), "--turns", "1"])


def test_demo_window_too_small_for_the_fixed_layers_stops_at_once_and_leaves_nothing(tmp_path):
  out = tmp_path / "demo"
  done = _cli("demo", "--out", str(out), "--window", "200")
  assert done.returncode == 2, done.stdout + done.stderr
  err = _one_line(done.stderr)
  assert "window" in err and "200" in err
  assert not out.exists() and "manifests written" not in done.stdout


@pytest.mark.parametrize("key", ["GOOGLE_API_KEY", "GEMINI_API_KEY"])
def test_demo_model_that_cannot_be_reached_is_one_line_and_keeps_the_earlier_run_intact(tmp_path, capsys, key):
  out = tmp_path / "demo"
  assert cli.main(["demo", "--out", str(out), "--turns", "1"]) == 0
  sessions = out / "apps" / "aether_demo" / "users" / "demo-user" / "sessions"
  before = sorted(p.name for p in sessions.iterdir())
  # Nothing listens on that port: the model call fails at once, as it does offline or with a bad key.
  done = _cli("demo", "--out", str(out), "--model", "gemini-2.5-flash", "--turns", "2",
              **{key: "not-a-key", "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{free_port()}"})
  assert done.returncode == 2, done.stdout + done.stderr
  assert "gemini-2.5-flash" in _one_line(done.stderr)
  assert sorted(p.name for p in sessions.iterdir()) == before  # the failed run's sessions are gone
  assert cli.main(["replay", "-q", str(sessions / before[-1])]) == 0


@pytest.mark.skipif(os.name != "posix", reason="SIGINT")
def test_demo_ctrl_c_is_one_line_exit_130_and_leaves_nothing(tmp_path):
  out = tmp_path / "demo"
  proc = subprocess.Popen([sys.executable, "-m", "aether_frame.cli", "demo", "--out", str(out), "--turns", "2000"],
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + 120
    while not any(out.glob("apps/aether_demo/users/*/sessions/*/artifacts/*/*/versions/*/manifest.json")):
      assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
      time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # the run is under way: it has written a manifest
    stdout, stderr = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 130, stderr
  assert "interrupted" in _one_line(stderr)
  assert not out.exists()


def test_demo_inspect_hint_survives_a_folder_with_spaces(tmp_path, capsys):
  out = tmp_path / "my démo ✓"
  assert cli.main(["demo", "--out", str(out), "--turns", "1"]) == 0
  hint = re.search(r"^inspect the last one with: (.+)$", capsys.readouterr().out, re.M).group(1)
  argv = shlex.split(hint)
  assert argv[:2] == ["aether-frame", "inspect"]
  assert cli.main(argv[1:]) == 0
  assert "checksum ok" in capsys.readouterr().out


# ------------------------------------------------------------------ inspect
def test_inspect_and_diff_refuse_a_manifest_of_another_schema(demo_session, tmp_path, capsys):
  session_dir, manifests = demo_session
  version, doc = manifests[-1]
  assert cli.main(["inspect", f"{session_dir}@{version}"]) == 0
  capsys.readouterr()
  other = dict(doc, schema="aether-frame/manifest@2")
  future = tmp_path / "future.json"
  future.write_text(json.dumps(finalize(body_of(other), other["runtime"])), encoding="utf-8")  # checksum holds
  assert "aether-frame/manifest@2" in _exit_2(capsys, ["inspect", str(future)])
  assert "aether-frame/manifest@2" in _exit_2(capsys, ["diff", f"{session_dir}@{version}", str(future)])
  # Replay used to call it DIFFERENT (exit 1, "same inputs, different decisions").
  capsys.readouterr()
  assert cli.main(["replay", str(future)]) == 2
  assert "manifest schema 'aether-frame/manifest@2'" in capsys.readouterr().out


@pytest.mark.parametrize("edit, says", [
    (lambda d: d.__setitem__("layers", []), "layers is not an object"),
    (lambda d: d.__setitem__("truncation_events", "x"), "truncation_events is not a list"),
    (lambda d: d["layers"]["memory"].__setitem__("used", float("nan")), "layers.memory.used is not a finite number"),
])
def test_tools_refuse_a_resigned_or_non_finite_manifest_in_one_line(demo_session, tmp_path, capsys, edit, says):
  """Such a file used to end in 'internal error: AttributeError …' with a traceback, or a bare ValueError."""
  _, manifests = demo_session
  doc = json.loads(json.dumps(manifests[-1][1]))
  edit(doc)
  bad = tmp_path / "bad.json"
  resign = "finite" not in says  # a NaN cannot be signed: the file keeps its old checksum
  bad.write_text(json.dumps(finalize(body_of(doc), doc["runtime"]) if resign else doc), encoding="utf-8")
  for argv in (["inspect", str(bad)], ["diff", str(bad), str(bad)]):
    assert _exit_2(capsys, argv) == f"aether-frame: refused: {bad}: not a valid manifest ({says})", argv


def test_inspect_budget_column_adds_up_to_usable_then_to_the_window(demo_session, capsys):
  """The slack (output reserve) row sat among the layers, so the column summed to neither."""
  session_dir, manifests = demo_session
  assert cli.main(["inspect", str(session_dir)]) == 0
  out = capsys.readouterr().out
  budget = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+|= usable|= window)\s+(\d+)", out, re.M)}
  layers = ("system", "task", "tools", "evidence", "memory", "conversation")
  doc = manifests[-1][1]
  assert sum(budget[n] for n in layers) + budget["unallocated"] == budget["= usable"] == doc["usable"]
  assert budget["= usable"] + budget["slack"] + budget.get("calibration", 0) == budget["= window"] == doc["window"]
  assert budget["slack"] == doc["reserve"]
  assert out.index("= usable") < out.index("slack") < out.index("= window")


# ---------------------------------------------------------- replay / flush
def test_replay_policy_override_errors_name_the_option_once(demo_session, capsys):
  session_dir, _ = demo_session
  assert "--policy-override" in _exit_2(capsys, ["replay", str(session_dir), "--policy-override", "memory_top_k=2"])
  err = _exit_2(capsys, ["replay", str(session_dir), "--policy-override", '{"memory_topk": 2}'])
  assert "--policy-override" in err and "memory_topk" in err
  rc = cli.main(["replay", "-q", str(session_dir), "--policy-override", '{"memory_top_k": 2}'])
  out = capsys.readouterr().out
  # The session's calls kept more than 2 memory items: with top-K 2 each decides differently (exit 1).
  assert rc == 1 and "beyond memory top-K (k=2)" in out and " 0 identical" in out, out


def test_replay_policy_override_file_errors_name_the_option_and_the_file(demo_session, tmp_path, capsys):
  """They were "'utf-8' codec can't decode byte 0xff …" and "FileNotFoundError: … ''"."""
  session_dir, _ = demo_session
  binary = tmp_path / "policy.bin"
  binary.write_bytes(b"\xff\xfe{}")
  for value, says in ((f"@{binary}", f"--policy-override @{binary}: not UTF-8 text (invalid start byte at byte 0)"),
                      ("@", "--policy-override @: name the file after the @"),
                      (f"@{tmp_path / 'none.json'}", f"--policy-override @{tmp_path / 'none.json'}: No such file or directory"),
                      (f"@{tmp_path}", f"--policy-override @{tmp_path}: Is a directory")):
    assert _exit_2(capsys, ["replay", str(session_dir), "--policy-override", value]).startswith(f"aether-frame: {says}")


def test_flush_refuses_a_file_as_spool_and_a_timeout_that_cannot_wait(tmp_path, capsys):
  spool_file = tmp_path / "spool.json"
  spool_file.write_text("{}")
  assert str(spool_file) in _exit_2(capsys, ["flush", "--spool", str(spool_file)])
  for timeout in ("0", "-1", "inf", "nan"):
    assert "--timeout" in _exit_2(capsys, ["flush", "--spool", str(tmp_path / "spool"), "--timeout", timeout])
