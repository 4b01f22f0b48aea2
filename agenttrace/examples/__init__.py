"""The reference agents and tools, installed under the project's own name.

In the repository they live at the top level, `agents/` and `tools/`; the package installs them as
`agenttrace.examples.agents` and `agenttrace.examples.tools` (pyproject's `package-dir`), so no
top-level `agents` or `tools` package lands in site-packages. They are consumers of the library,
built only on its public API; nothing in the library imports them (the demo and the benchmarks
reach them through the entry points in pyproject.toml).
"""
