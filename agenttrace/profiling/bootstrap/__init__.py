"""The folder `agenttrace run` puts first on a program's PYTHONPATH: it holds only
`sitecustomize.py` (the child-side bootstrap), so nothing else of ours becomes importable there.
In-process, `agenttrace.profiling` imports that module under its package name for its
instrumentation functions; it then sets nothing up by itself."""

from pathlib import Path

BOOTSTRAP_DIR = Path(__file__).resolve().parent
