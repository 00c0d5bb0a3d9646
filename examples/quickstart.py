"""Quickstart: the demo app as a script (same as ``aether-frame demo``)."""

from aether_frame.demo import main

if __name__ == "__main__":
  raise SystemExit(main(out="aether-frame-demo", window=8192))
