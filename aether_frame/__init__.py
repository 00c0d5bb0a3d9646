"""aether-frame."""
