"""Cached virtual environments for the tests that need another project's packages (Phoenix, the
ecosystem's instrumentations), kept out of the project's own environment.

Each environment is built once from pinned requirements, by the interpreter running the tests,
under the user cache dir (or the folder an environment variable names), and rebuilt when its
requirements change (a stamp holds them). A lock keeps two test runs on one machine from
building the same one at once; a half-built environment (no stamp) is built again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

INSTALL_TIMEOUT_S = 900
_STAMP = ".agenttrace-venv"


def venv_dir(name: str, env_var: str | None = None) -> Path:
    """`env_var`'s folder when set, else `<user cache>/agenttrace/<name>-py3XY`."""
    explicit = os.environ.get(env_var) if env_var else None
    if explicit:
        return Path(explicit)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("agenttrace")) / f"{name}-py{sys.version_info.major}{sys.version_info.minor}"


def is_built(venv: Path, requirements: Sequence[str]) -> bool:
    """`venv` exists, built with exactly `requirements` (nothing to install)."""
    stamp = venv / _STAMP
    return stamp.is_file() and stamp.read_text() == "\n".join(requirements) + "\n"


def ensure_venv(venv: Path, requirements: Sequence[str]) -> Path:
    """The `bin` folder of `venv`, built with exactly `requirements` (pip specifiers) if it is
    missing or was built for other ones."""
    want = "\n".join(requirements) + "\n"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = venv / _STAMP
        if not (stamp.is_file() and stamp.read_text() == want):
            shutil.rmtree(venv, ignore_errors=True)
            log = venv.parent / f"{venv.name}-install.log"
            with open(log, "w") as out:
                for cmd in (
                    [sys.executable, "-m", "venv", str(venv)],
                    [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                     *requirements],
                ):
                    done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S)
                    if done.returncode != 0:
                        tail = log.read_text(errors="replace")[-3000:]
                        raise RuntimeError(f"building {venv} failed ({' '.join(cmd)}); see {log}:\n{tail}")
            stamp.write_text(want)
    return venv / "bin"
