"""The environments the ecosystem's instrumentations are tested in: one cached virtual environment
per instrumentation (their pins of the OpenTelemetry packages differ from ours and from each
other's), with the versions NOTES-ecosystem.md measured. Built on first use (about 15 s each
with PyPI reachable), under the user cache dir or AGENTTRACE_FOREIGN_VENVS.

util-genai is pinned at 1.1b0: 1.2b0 and later dropped `opentelemetry.util.genai.instruments`,
which openai-v2 2.4b0 imports. From 1.0b0 on, util-genai writes the current GenAI attribute set
whatever OTEL_SEMCONV_STABILITY_OPT_IN says; the attribute set before v1.37 (`gen_ai.system`) is
what openai-v2 writes with util-genai 0.4b0, the `genai-legacy` environment. openai 3.x uses
`httpx2`; openai-v2 imports `httpx`, so it is listed.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from cached_venv import ensure_venv, venv_dir

ROOT = Path(__file__).resolve().parents[1]
OPENAI = "openai==3.57.0"
OTEL = ["opentelemetry-sdk==1.45.2", "opentelemetry-exporter-otlp-json-file==0.66b1", "httpx==0.28.1"]


def _project_dependencies() -> list[str]:
    """agenttrace's own runtime dependencies, for the environment that also imports agenttrace
    (from the checkout, through PYTHONPATH, so it is always the code under test)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


ENVIRONMENTS: dict[str, list[str]] = {
    "genai": [OPENAI, "opentelemetry-instrumentation-openai-v2==2.4b0", "opentelemetry-util-genai==1.1b0", *OTEL],
    "genai-legacy": [OPENAI, "opentelemetry-instrumentation-openai-v2==2.4b0", "opentelemetry-util-genai==0.4b0", *OTEL],
    "openinference": [OPENAI, "openinference-instrumentation-openai==0.1.66", "openinference-instrumentation==0.1.72",
                      "openinference-semantic-conventions==0.1.42", *OTEL],
    # traceloop's instrumentation, plus what agenttrace needs, for the mixed trace
    "openllmetry": [OPENAI, "opentelemetry-instrumentation-openai==0.62.4", *OTEL],
    "pydantic-ai": ["pydantic-ai-slim==2.68.0", *OTEL],
    # what `agenttrace run` needs in a program's environment: the instrumentation, the SDK and the
    # OTLP/HTTP exporter (tests/profiling/test_run_command.py)
    "openinference-otlp": [OPENAI, "openinference-instrumentation-openai==0.1.66", "openinference-instrumentation==0.1.72",
                           "openinference-semantic-conventions==0.1.42", "opentelemetry-sdk==1.45.2",
                           "opentelemetry-exporter-otlp-proto-http==1.45.2"],
}


def requirements(name: str) -> list[str]:
    reqs = ENVIRONMENTS[name]
    if name == "openllmetry":
        reqs = [*reqs, *(d for d in _project_dependencies() if not d.startswith(("opentelemetry-sdk", "opentelemetry-api")))]
    return reqs


def python(name: str) -> Path:
    """The interpreter of the environment `name`, built if needed."""
    base = os.environ.get("AGENTTRACE_FOREIGN_VENVS")
    venv = Path(base) / name if base else venv_dir(f"foreign-{name}")
    return ensure_venv(venv, requirements(name)) / "python"
