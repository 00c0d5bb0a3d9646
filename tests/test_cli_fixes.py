"""Reviewed CLI defects, each as a user meets it: replay LOCATION@N, --policy-override values,
an unwritable or unbounded demo, a closed pipe, report's byte count, the bucket script's guard
rails, the LoCoMo benchmark's data errors, the documented exit codes, and diff across sessions."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from aether_frame import cli
from aether_frame.demo import run_demo
from tests.cli_support import exit_2 as _exit_2, load_benchmark, one_line as _one_line

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "infra" / "apply_bucket_policy.sh"


def _env(**extra: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI")}
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
  env.update(extra)
  return env


def _cli(*args: str, stdout=subprocess.PIPE, **env: str) -> subprocess.CompletedProcess:
  """``aether-frame ARGS`` as its own process: the exit status and stderr a shell sees."""
  return subprocess.run([sys.executable, "-m", "aether_frame.cli", *args], env=_env(**env),
                        stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)






@pytest.fixture(scope="module")
def demo_session(tmp_path_factory):
  """A short demo run: its session folder, its manifests (version, doc), and the store root."""
  out = tmp_path_factory.mktemp("demo") / "out"
  session_dir, manifests = asyncio.run(run_demo(out, turns=2))
  return session_dir, manifests, out


# ------------------------------------------------------ 1: replay LOCATION@N
def test_replay_takes_location_at_version_like_inspect_and_diff(demo_session, capsys):
  session_dir, manifests, _ = demo_session
  versions = [v for v, _ in manifests]
  assert len(versions) >= 3
  for ref, want in ((f"{session_dir}@{versions[1]}", versions[1]), (f"{session_dir}@-1", versions[-1])):
    assert cli.main(["replay", ref]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"^identical\s+\S+ v(\d+)$", out, re.M) == [str(want)], out
    assert out.rstrip().endswith("1 calls: 1 identical, 0 different, 0 refused, 0 errors"), out
  err = _exit_2(capsys, ["replay", f"{session_dir}@99"])
  assert "no version 99" in err
  # --policy-override applies to that one call.
  assert cli.main(["replay", "-q", f"{session_dir}@{versions[-1]}", "--policy-override", '{"memory_top_k": 0}']) == 1
  assert "1 calls: 0 identical, 1 different" in capsys.readouterr().out


def test_replay_quiet_leaves_identical_calls_out_of_json_too(demo_session, capsys):
  """``-q --json`` printed every call: a script reading it for differences saw them all."""
  session_dir, manifests, _ = demo_session
  assert cli.main(["replay", "--json", str(session_dir)]) == 0
  every = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert len(every) == len(manifests) and {r["status"] for r in every} == {"identical"}
  assert cli.main(["replay", "--json", "-q", str(session_dir)]) == 0
  assert capsys.readouterr().out == ""
  assert cli.main(["replay", "--json", "-q", str(session_dir), "--policy-override", '{"memory_top_k": 0}']) == 1
  quiet = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert quiet and {r["status"] for r in quiet} == {"different"}


# ------------------------------------------- 2: --policy-override values
@pytest.mark.parametrize("override, names", [
    ('{"memory_top_k": -1}', "memory_top_k"),
    ('{"floors": {"system": 0.9}}', "floors"),
    ('{"profile": "nope"}', "profile"),
])
def test_replay_policy_override_bad_values_are_one_error_before_any_call(demo_session, capsys, override, names):
  session_dir, _, _ = demo_session
  for where in (str(session_dir), f"{session_dir}@0"):
    err = _exit_2(capsys, ["replay", where, "--policy-override", override])
    assert err.startswith("aether-frame: --policy-override: ") and names in err, err
    assert capsys.readouterr().out == ""  # nothing replayed, no per-call errors


# ------------------------------------------------- 3: demo --out unwritable
def _spool_state(*folders: Path) -> list[str]:
  return sorted(str(p) for f in folders if f.exists() for p in f.rglob("*"))


@pytest.mark.parametrize("where", [
    pytest.param("proc", marks=pytest.mark.skipif(not os.path.isdir("/proc/1"), reason="no /proc")),
    pytest.param("read-only", marks=pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                                                       reason="root writes into read-only folders")),
])
def test_demo_out_that_cannot_be_written_is_refused_before_the_run(tmp_path, where):
  if where == "proc":
    out = Path("/proc/1")
  else:
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(stat.S_IRUSR | stat.S_IXUSR)
  spool, tmp = tmp_path / "spool", tmp_path / "tmp"
  tmp.mkdir()
  done = _cli("demo", "--out", str(out), "--turns", "2", AETHER_FRAME_SPOOL_DIR=str(spool), TMPDIR=str(tmp))
  assert done.returncode == 2, done.stdout + done.stderr
  assert f"--out {out}" in _one_line(done.stderr)
  assert "manifests written" not in done.stdout
  assert _spool_state(spool, tmp) == []  # nothing spooled anywhere


def test_demo_out_that_takes_no_manifest_fails_and_spools_nothing(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "apps").write_text("a file where FileArtifactService needs its apps/ folder")
  spool, tmp = tmp_path / "spool", tmp_path / "tmp"
  tmp.mkdir()
  done = _cli("demo", "--out", str(out), "--turns", "2", AETHER_FRAME_SPOOL_DIR=str(spool), TMPDIR=str(tmp))
  assert done.returncode == 2, done.stdout + done.stderr
  err = _one_line(done.stderr)
  assert f"--out {out}" in err and "cannot be stored" in err, err
  assert "manifests written" not in done.stdout
  assert _spool_state(spool, tmp) == []
  assert sorted(p.name for p in out.iterdir()) == ["apps"]  # left as found


def test_demo_out_made_for_a_failed_run_is_removed_with_its_parents(tmp_path, capsys):
  top = tmp_path / "new"
  err = _exit_2(capsys, ["demo", "--out", str(top / "a" / "b"), "--window", "200"])
  assert "--window 200" in err
  assert not top.exists()


# ------------------------------------------------------ 4: a closed pipe
@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_replay_into_a_closed_pipe_is_not_a_difference(demo_session, unbuffered):
  session_dir, _, _ = demo_session
  r, w = os.pipe()
  os.close(r)  # the reader is gone before the first line (`| head -0`)
  try:
    done = _cli("replay", str(session_dir), stdout=w, PYTHONUNBUFFERED=unbuffered)
  finally:
    os.close(w)
  assert done.returncode == 141, done.stderr
  assert done.stderr == ""  # no "Exception ignored … BrokenPipeError" at exit
  assert _cli("replay", "-q", str(session_dir)).returncode == 0  # every call matches: a full run says 0


def test_demo_into_a_closed_pipe_exits_141_without_a_traceback(tmp_path):
  r, w = os.pipe()
  os.close(r)  # `aether-frame demo | head -0`
  try:
    done = _cli("demo", "--out", str(tmp_path / "out"), "--turns", "2", stdout=w)
  finally:
    os.close(w)
  assert done.returncode == 141, done.stderr
  assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
  # The run finished before its output was cut: its manifests stay, and replay says they match.
  assert list((tmp_path / "out").rglob("versions/*/manifest.json"))
  assert _cli("replay", "-q", str(tmp_path / "out")).returncode == 0


# --------------------------------------------------------- 5: report bytes
def test_report_prints_the_byte_count_of_the_file(demo_session, tmp_path, capsys):
  session_dir, _, _ = demo_session
  out = tmp_path / "r.html"
  assert cli.main(["report", str(session_dir), "-o", str(out)]) == 0
  said = int(re.search(r"\(([\d,]+) bytes", capsys.readouterr().out).group(1).replace(",", ""))
  size = out.stat().st_size
  assert len(out.read_text(encoding="utf-8")) != size  # the page has non-ASCII text: characters are not bytes
  assert said == size


def _small_file_limit(limit: int):
  def apply():  # in the child: writes past `limit` bytes fail with EFBIG (Python ignores SIGXFSZ)
    import resource
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
  return apply


def test_report_that_cannot_be_written_whole_leaves_the_old_file_and_names_the_output(demo_session, tmp_path):
  session_dir, _, _ = demo_session
  out = tmp_path / "r.html"
  out.write_text("the previous report", encoding="utf-8")
  done = subprocess.run([sys.executable, "-m", "aether_frame.cli", "report", str(session_dir), "-o", str(out)],
                        env=_env(), capture_output=True, text=True, timeout=300, preexec_fn=_small_file_limit(4096))
  assert done.returncode == 2, done.stdout + done.stderr
  assert _one_line(done.stderr) == f"aether-frame: {out}: File too large"
  assert out.read_text(encoding="utf-8") == "the previous report"  # not a half page
  assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]  # no temporary file left


def test_report_into_a_missing_folder_names_the_output_file(demo_session, tmp_path, capsys):
  session_dir, _, _ = demo_session
  out = tmp_path / "no-such-folder" / "r.html"
  err = _exit_2(capsys, ["report", str(session_dir), "-o", str(out)])
  assert err == f"aether-frame: {out}: No such file or directory"


# ------------------------------------------------------- 6: --turns bound
@pytest.mark.parametrize("turns", ["10001", "1000000000000"])
def test_demo_turns_beyond_the_maximum_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, turns):
  out = tmp_path / "demo"
  err = _exit_2(capsys, ["demo", "--out", str(out), "--turns", turns])
  assert "--turns" in err and "10,000" in err
  assert not out.exists()


def test_demo_turns_are_generated_one_at_a_time():
  from aether_frame.demo import iter_scripted_turns, scripted_turns
  turns = iter_scripted_turns(10**12)
  assert [next(turns) for _ in range(5)] == scripted_turns(5)


# ------------------------------------------- 7: apply_bucket_policy.sh
@pytest.fixture
def no_real_gcloud(tmp_path):
  """gcloud and gsutil on PATH are tripwires: these cases must stop before running either."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  ran = tmp_path / "ran"
  for tool in ("gcloud", "gsutil"):
    (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{ran}"\n')
    (bin_dir / tool).chmod(0o755)
  return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}"), ran


@pytest.mark.parametrize("args, says", [
    (["gs://b", "--app", "--dry-run"], "--app"),
    (["gs://b", "--app"], "--app"),
    (["gs://b", "--app", ""], "--app"),
    (["gs://b", "--app", "-x", "--dry-run"], "--app"),
    (["gs://b", "--app", "a/b", "--dry-run"], "--app"),
    (["gs://b", "--app", "context-pack-blobs", "--dry-run"], "--app"),
    (["gs://b/prefix", "--app", "shop", "--dry-run"], "gs://b/prefix"),
    (["gs://", "--app", "shop", "--dry-run"], "gs://"),
    (["gs://My_Bucket", "--app", "shop", "--dry-run"], "gs://My_Bucket"),
    (["gs://b", "gs://c", "--app", "shop", "--dry-run"], "gs://c"),
    (["gs://b", "--app", "shop", "--location", "--dry-run"], "--location"),
])
def test_bucket_script_refuses_bad_app_and_bucket_values(no_real_gcloud, args, says):
  env, ran = no_real_gcloud
  p = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)
  assert p.returncode == 2, p.stdout + p.stderr
  assert says in _one_line(p.stderr)
  assert not ran.exists() and "+ " not in p.stdout  # nothing run, nothing even printed as a plan


def test_bucket_script_accepts_a_trailing_slash_and_renders_the_app_prefix(no_real_gcloud):
  env, ran = no_real_gcloud
  p = subprocess.run(["bash", str(SCRIPT), "gs://my-bucket.eu/", "--app", "shop/", "--dry-run"],
                     capture_output=True, text=True, timeout=60, env=env)
  assert p.returncode == 0, p.stderr
  assert "+ gcloud storage buckets update gs://my-bucket.eu " in p.stdout and not ran.exists()
  rules = json.loads(p.stdout.split("--- lifecycle", 1)[1].split("\n", 1)[1])["rule"]
  assert ["shop/"] in [r["condition"].get("matchesPrefix") for r in rules]


# ------------------------------------------------- 8: LoCoMo data errors


@pytest.mark.parametrize("text, says", [
    ('{"session_1": [{"dia_id": "D1:1", ', "not JSON"),
    ("[]", "got a JSON list"),
    ('{"session_1": []}', "missing field 'session_1_date_time'"),
])
def test_locomo_benchmark_names_a_bad_data_file(tmp_path, capsys, text, says):
  (tmp_path / "26.json").write_text(text, encoding="utf-8")
  assert load_benchmark("locomo_recall").main(["--data", str(tmp_path), "--conversations", "26", "--no-embedder"]) == 2
  err = _one_line(capsys.readouterr().err)
  assert str(tmp_path / "26.json") in err and says in err, err


# ------------------------------------------------- 9: documented exit codes
def test_docs_exit_codes_say_what_the_tools_do(demo_session, capsys):
  session_dir, _, _ = demo_session
  doc = (ROOT / "docs" / "manifests.md").read_text(encoding="utf-8")
  row1 = re.search(r"^\| 1 \|(.*)$", doc, re.M).group(1)
  assert "`replay`" in row1 and "`flush`" in row1 and "No other tool exits 1" in row1
  assert re.search(r"^\| 141 \|", doc, re.M)
  assert "`diff` exits 0 when the two calls differ" in doc
  assert cli.main(["diff", str(session_dir), "0", "-1"]) == 0  # … and it does
  assert re.search(r"^total .*[+-][1-9]", capsys.readouterr().out, re.M)


# ----------------------------------------------- 10: diff across sessions
def test_diff_across_sessions_says_so_in_one_line(demo_session, capsys):
  session_dir, _, _ = demo_session
  other = next(p for p in session_dir.parent.iterdir() if p != session_dir)  # the demo's memory-seeding session
  assert cli.main(["diff", f"{session_dir}@-1", f"{other}@0"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[2].startswith("note: A and B are from different sessions") and session_dir.name in lines[2], lines[:4]
  assert cli.main(["diff", "--json", f"{session_dir}@-1", f"{other}@0"]) == 0
  assert "different sessions" in json.loads(capsys.readouterr().out)["notes"][0]
  assert cli.main(["diff", str(session_dir), "0", "-1"]) == 0  # one session: no such note
  assert "different sessions" not in capsys.readouterr().out


# ------------------------------------------- 11: a folder name that is not UTF-8
@pytest.fixture
def non_utf8_session(demo_session, tmp_path):
  """A copy of the demo store whose session folder is named b"sess\\xff\\xfe" (a Latin-1 name, say)."""
  import shutil
  session_dir, _, _ = demo_session
  sessions = tmp_path / "store" / session_dir.relative_to(session_dir.parents[5]).parent
  shutil.copytree(session_dir.parents[5], tmp_path / "store")
  old = sessions / session_dir.name
  new = os.fsencode(sessions) + b"/sess\xff\xfe"
  os.rename(old, new)
  return new


def _cli_bytes(*args, **env: str) -> subprocess.CompletedProcess:
  """As ``_cli``, with byte arguments and output, under a strict UTF-8 stdout (a UTF-8 locale's)."""
  return subprocess.run([sys.executable.encode(), b"-m", b"aether_frame.cli", *args], env=_env(PYTHONIOENCODING="utf-8", **env),
                        capture_output=True, timeout=300)


def test_tools_read_a_session_folder_whose_name_is_not_utf8(non_utf8_session, tmp_path):
  """report died on encoding its page, --json wrote bytes no JSON reader takes, inspect died printing."""
  where = non_utf8_session
  out = tmp_path / "r.html"
  done = _cli_bytes(b"report", where, b"-o", os.fsencode(out))
  assert done.returncode == 0, done.stderr
  page = out.read_bytes().decode("utf-8")  # strict: the page is UTF-8
  assert "sess\\udcff\\udcfe" in page
  done = _cli_bytes(b"diff", b"--json", where, b"0", b"1")
  assert done.returncode == 0, done.stderr
  assert json.loads(done.stdout.decode("utf-8"))["a"].endswith("sess\udcff\udcfe v0")  # the name, as os.fsdecode gives it
  done = _cli_bytes(b"replay", b"--json", where + b"@1")
  assert done.returncode == 0, done.stderr
  assert json.loads(done.stdout.decode("utf-8"))["status"] == "identical"
  done = _cli_bytes(b"inspect", where)
  assert done.returncode == 0, done.stderr
  assert "sess\\udcff\\udcfe v" in done.stdout.decode("utf-8").splitlines()[0]
