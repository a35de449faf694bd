"""The hostile corpus (build.py)."""
