"""The reference agents and tools, installed under the project's own name.

In the repository they live at the top level, `agents/` and `tools/`; the package installs them as
`agenttrace.examples.agents` and `agenttrace.examples.tools` (pyproject's `package-dir`), so no
top-level `agents` or `tools` package lands in site-packages. They are consumers of the library,
built only on its public API. The library imports them in one place only, the benchmarks'
workloads (`agenttrace/bench/workloads.py`); the demo comes in through its entry point in
pyproject.toml.
"""
