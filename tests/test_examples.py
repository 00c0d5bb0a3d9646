"""The README's quickstart example runs as a user would run it: offline, as a script."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from aether_frame import cli

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_offline_and_sends_a_pack(tmp_path, capsys):
  env = {k: v for k, v in os.environ.items() if k != "GOOGLE_API_KEY"}  # offline model
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
  done = subprocess.run(
      [sys.executable, str(ROOT / "examples" / "quickstart.py")],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
  )
  assert done.returncode == 0, done.stdout + done.stderr
  assert "fault" not in done.stderr, done.stderr
  assert re.search(r"^last pack: \{'pack_id': 'pack_\w+', 'version': 1,.*'valid': True, 'invocation_id': 'e-[\w-]+'\}$",
                   done.stdout, re.M), done.stdout

  hint = re.search(r"^inspect it: aether-frame inspect (\S+)$", done.stdout, re.M).group(1)
  assert cli.main(["inspect", str(tmp_path / hint)]) == 0
  assert "model offline-quickstart" in capsys.readouterr().out
