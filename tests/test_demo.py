"""The README's first command: ``aether-frame demo``, then ``inspect`` on what it prints."""

from __future__ import annotations

import json
import re

import pytest

from aether_frame import cli


def test_demo_writes_verified_manifests_and_its_inspect_hint_works(tmp_path, capsys):
  out = tmp_path / "demo"
  assert cli.main(["demo", "--out", str(out), "--turns", "6"]) == 0
  printed = capsys.readouterr().out
  calls = re.findall(r"^call (\d+) \(v\d+\)\s+(pack_\w+)\s+agent=researcher\s+window=8192\s+tokens \d+/\d+ usable \((\d+)%\)\s+(\S+)", printed, re.M)
  assert len(calls) >= 6  # one per turn, more when a turn calls a tool
  assert [int(n) for n, *_ in calls] == list(range(1, len(calls) + 1))
  assert all(status == "valid" and 0 < int(pct) <= 100 for _, _, pct, status in calls)
  assert f"{len(calls)} manifests of the demo session written under {out.resolve()} (with the memory-seeding session's)" in printed
  sessions = sorted((out / "apps" / "aether_demo").glob("users/*/sessions/*"))
  stored = sorted(len(list(s.glob("artifacts/context_pack/manifest.json/versions/*/manifest.json"))) for s in sessions)
  assert len(sessions) == 2 and stored[-1] == len(calls) and stored[0] > 0  # the count printed is the demo session's

  # The hint names the demo's own session, although the folder also holds the
  # memory-seeding session's manifests.
  hint = re.search(r"inspect the last one with: aether-frame inspect (\S+)", printed).group(1)
  assert cli.main(["inspect", hint, "--json"]) == 0
  doc = json.loads(capsys.readouterr().out)
  assert doc["pack_id"] == calls[-1][1]
  assert cli.main(["inspect", str(out)]) != 0  # ambiguous on purpose: two sessions
  assert "holds 2 sessions" in capsys.readouterr().err


def test_demo_refuses_gemini_without_an_api_key(tmp_path, monkeypatch):
  for var in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):  # whatever the developer has set
    monkeypatch.delenv(var, raising=False)
  out = tmp_path / "demo"
  with pytest.raises(SystemExit, match="GOOGLE_API_KEY"):
    cli.main(["demo", "--out", str(out), "--model", "gemini-2.5-flash"])
  assert not out.exists()


def _table_rows(block: str) -> dict[str, list[int]]:
  """A budget table's rows by name: its fixed-width columns (budget, +unused, used,
  dropped), 0 where a cell is blank."""
  rows = {}
  for line in block.splitlines()[2:]:
    name, cells = line[:17].strip(), line[17:50]
    rows[name] = [int(cells[i:i + w].strip() or 0) for i, w in ((0, 8), (8, 8), (16, 8), (24, 9))]
    if name == "= window":
      return rows
  raise AssertionError(f"no '= window' row in:\n{block}")


@pytest.mark.parametrize("window,turns", [(8192, 4), (1000, 10)])
def test_demo_table_adds_up_and_names_manifest_versions(tmp_path, capsys, window, turns):
  """At 1,000 tokens the evidence layer takes budget other layers left unused: the
  budgets once added up to more than ``usable`` (1,010 of 847 at call 5)."""
  out = tmp_path / "demo"
  assert cli.main(["demo", "--out", str(out), "--turns", str(turns), "--window", str(window)]) == 0
  printed = capsys.readouterr().out
  blocks = re.split(r"\n(?=call \d+ )", printed.strip())[1:]
  assert blocks
  regranted = []
  for block in blocks:
    n, v, tokens, usable, pct = map(int, re.match(
        r"call (\d+) \(v(\d+)\)\s.*tokens (\d+)/(\d+) usable \((\d+)%\)", block).groups())
    assert v == n - 1  # calls count from 1, ADK versions from 0
    assert pct == round(100 * tokens / usable)
    rows = _table_rows(block)
    layers = ("system", "task", "tools", "evidence", "memory", "conversation")
    assert sum(rows[k][0] for k in layers) + rows["unallocated"][0] == rows["= usable"][0] == usable
    assert sum(rows[k][2] for k in layers) == rows["= usable"][2] == tokens
    assert rows["= usable"][0] + rows["slack (output)"][0] + rows["calibration"][0] == rows["= window"][0] == window
    if sum(rows[k][1] for k in layers):
      regranted.append(v)
  if window == 1000:
    assert regranted, "the small window must regrant unused budget: nothing was tested"
    # inspect's table adds up the same way.
    session = re.search(r"inspect the last one with: aether-frame inspect (\S+)", printed).group(1)
    v = regranted[-1]  # the chat's (the seeding session prints first)
    assert cli.main(["inspect", f"{session}@{v}"]) == 0
    shown = capsys.readouterr().out.split("\nlayer ", 1)[1].splitlines()[1:9]
    cells = {line[:14].strip(): [int(line[14 + 8 * c:22 + 8 * c].strip() or 0) for c in range(2)] for line in shown}
    assert cells["evidence"][1] + cells["memory"][1] > 0
    usable = int(re.search(r"/(\d+) usable", printed.rsplit(f"(v{v})", 1)[1]).group(1))
    assert sum(cells[k][0] for k in layers) + cells["unallocated"][0] == usable
    # diff shows that budget the same way, as share+received.
    assert cli.main(["diff", f"{session}@{v}", f"{session}@{v}"]) in (0, 1)
    shown = capsys.readouterr().out
    name = "evidence" if cells["evidence"][1] else "memory"
    row = next(line for line in shown.splitlines() if line.startswith(name))
    assert row.split()[4] == f"{cells[name][0]}+{cells[name][1]}", row
