"""Builds the cached environments a test session will need, in a background process at the lowest
CPU priority, while the session's other tests run (tests/conftest.py starts it after collection).

A fresh machine spends minutes installing Phoenix and the instrumentations' environments, mostly
waiting on the network and the disk; built in the foreground, that time adds to the session's.
Each environment is built under its own lock (tests/cached_venv.py), so a test that needs one
before it is ready waits for this process instead of building it twice; a failure here is only
logged, and the test that needs the environment builds it again and fails with the cause.

Names: `phoenix`, `foreign:<name>` (tests/foreign_envs.py), `framework:<folder>:<requirements>`
(tests/frameworks/<folder>/<requirements>).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(name: str) -> None:
    kind, _, rest = name.partition(":")
    if kind == "phoenix":
        from phoenix_server import ensure_phoenix

        ensure_phoenix()
    elif kind == "foreign":
        import foreign_envs

        foreign_envs.python(rest)
    elif kind == "framework":
        sys.path.insert(0, str(HERE / "frameworks"))
        from record import Recording

        folder, requirements = rest.split(":")
        Recording(name=folder, folder=HERE / "frameworks" / folder, requirements=requirements).python()
    else:
        raise ValueError(f"unknown environment {name!r}")


def main(names: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    for name in names:
        try:
            build(name)
            print(f"built {name}", flush=True)
        except Exception:  # the test that needs it builds it again and reports the cause
            print(f"could not build {name}:\n{traceback.format_exc()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
