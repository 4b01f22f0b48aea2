#!/usr/bin/env bash
# Build llama-cpp-python into its own cached venv for the `llama_cpp` peer arm of
# `agenttrace bench generation`. Optional: nothing in the library or the test suite needs it.
# PyPI ships it as a source package, so pip compiles llama.cpp here (about 15 minutes on
# 2 cores, once); the venv is then reused. Prints the venv's python on its last line.
# The bench finds it at $AGENTTRACE_LLAMA_VENV, else .venv-llama beside .venv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${AGENTTRACE_LLAMA_VENV:-$root/.venv-llama}"
python="${PYTHON:-python3}"
version="${LLAMA_CPP_VERSION:-0.3.36}"

stamp="$venv/.llama-cpp-python"
if [ "$(cat "$stamp" 2>/dev/null)" != "$version" ]; then
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  echo "llama_cpp: building llama-cpp-python==$version into $venv (about 15 minutes on 2 cores, once)" >&2
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/python" -m pip --disable-pip-version-check -q \
    install "llama-cpp-python==$version"
  echo "$version" > "$stamp"
fi
echo "$venv/bin/python"
