"""Record real agent frameworks' traces, with their ground truth, as test data.

    ./scripts/record-frameworks                 # every recording (builds the environments once)
    ./scripts/record-frameworks smolagents-openinference openai-agents-chat
    ./scripts/record-frameworks --list
    ./scripts/record-frameworks --table         # each recording's truth beside its report (Markdown)
    ./scripts/record-frameworks --truth-only    # derive the truth files again from their raw events

Each folder here (`tests/frameworks/<framework>/`) holds an agent script and `recordings.toml`:

    [[recording]]
    name = "smolagents-openinference"       # the files: traces/frameworks/<name>.jsonl, .truth.json
    requirements = "requirements.txt"       # pinned, in this folder: one cached environment per file
    args = ["--model-api", "chat"]           # the script's arguments
    framework = "smolagents"                 # the distribution whose version the truth names
    instrumentation = "openinference-instrumentation-smolagents"
    expect_not_inferred = []                 # figures its spans cannot give (the report must say why)

For each recording the driver starts the fake OpenAI server (fake_llm.py) and an OTLP/HTTP
receiver on loopback, runs the script in its environment (tests/cached_venv.py: built once from
the pinned requirements, under the user cache dir or AGENTTRACE_FRAMEWORK_VENVS), writes what the
receiver got as OTLP/JSON lines (the format of our trace files) and the ground truth
(ground_truth.py), then prints the report's figures beside the truth (compare.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
ROOT = TESTS.parent
sys.path[:0] = [str(HERE), str(TESTS)]

import cached_venv  # noqa: E402
import fake_llm  # noqa: E402
import ground_truth  # noqa: E402
from compare import side_by_side, summary  # noqa: E402
from otlp_receiver import http_receiver  # noqa: E402

from agenttrace.profiling.receiver import otlp_json_lines  # noqa: E402  (what `agenttrace run` writes)

OUT = ROOT / "traces" / "frameworks"
RUN_TIMEOUT_S = 600
# What frameworks would otherwise fetch or report at run time (the network reaches only PyPI).
QUIET_ENV = {
    "OPENAI_API_KEY": "sk-fake", "DO_NOT_TRACK": "1", "ANONYMIZED_TELEMETRY": "false", "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true", "OTEL_SDK_DISABLED": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TOKENIZERS_PARALLELISM": "false", "LANGCHAIN_TRACING_V2": "false",
    "SCARF_NO_ANALYTICS": "true", "PYTHONDONTWRITEBYTECODE": "1",
    "TRACELOOP_TELEMETRY": "false", "POSTHOG_DISABLED": "1", "AUTOGEN_DISABLE_TELEMETRY": "1",
}


@dataclass
class Recording:
    name: str
    folder: Path
    requirements: str
    args: list[str] = field(default_factory=list)
    script: str = "agent.py"
    framework: str = ""
    instrumentation: str = ""
    env: dict[str, str] = field(default_factory=dict)
    # figures this instrumentation's spans cannot give (e.g. no model call recorded): the report
    # must say so, with why, instead of matching the truth there
    expect_not_inferred: list[str] = field(default_factory=list)

    def meta(self) -> dict[str, Any]:
        return {"recording": self.name, "framework": self.framework, "instrumentation": self.instrumentation,
                "command": f"./scripts/record-frameworks {self.name}", "expect_not_inferred": self.expect_not_inferred}

    def pins(self) -> list[str]:
        lines = (self.folder / self.requirements).read_text().splitlines()
        return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]

    def venv(self) -> Path:
        """Where the recording's environment lives (one per framework folder and requirements file)."""
        stem = Path(self.requirements).stem.removeprefix("requirements").strip("-_") or "default"
        name = f"framework-{self.folder.name}-{stem}"
        base = os.environ.get("AGENTTRACE_FRAMEWORK_VENVS")
        return Path(base) / name if base else cached_venv.venv_dir(name)

    def built(self) -> bool:
        return cached_venv.is_built(self.venv(), self.pins())

    def python(self) -> Path:
        """The recording's interpreter, its environment built on first use."""
        return cached_venv.ensure_venv(self.venv(), self.pins()) / "python"


def recordings() -> list[Recording]:
    found = []
    for toml in sorted(HERE.glob("*/recordings.toml")):
        for entry in tomllib.loads(toml.read_text())["recording"]:
            found.append(Recording(folder=toml.parent, **entry))
    return found


def record(rec: Recording, out: Path = OUT) -> tuple[Path, Path]:
    """Run one recording; returns (trace file, truth file). Raises with the script's output when
    it fails or records nothing."""
    python = rec.python()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, fake_llm.running() as llm, http_receiver() as (otlp, received):
        events = Path(tmp) / "events.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTTRACE_", "PYTHON", "VIRTUAL_ENV"))}
        env.update(QUIET_ENV)
        env.update({
            "PYTHONPATH": str(HERE), "HOME": tmp, "AGENTTRACE_FAKE_LLM": llm.base_url, "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_BASE": llm.base_url, "AGENTTRACE_TRUTH_EVENTS": str(events),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{otlp}/v1/traces", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            **rec.env,
        })
        cmd = [str(python), str(rec.folder / rec.script), *rec.args]
        done = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        if done.returncode != 0 or not events.is_file() or not received.requests:
            raise RuntimeError(f"{rec.name}: {' '.join(cmd)} exited {done.returncode}"
                               f"{'' if received.requests else ', no spans received'}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
        truth = ground_truth.truth(json.loads(events.read_text()), list(llm.log), rec.meta())
        failed = [t for t in truth["tasks"] if t["error"]]
        if failed:
            print(f"{rec.name}: {len(failed)} task(s) raised: " + "; ".join(t["error"][:200] for t in failed), file=sys.stderr)
        trace_path, truth_path = out / f"{rec.name}.jsonl", out / f"{rec.name}.truth.json"
        trace_path.write_text("\n".join(otlp_json_lines(received.requests)) + "\n")
        truth_path.write_text(json.dumps(truth, indent=1) + "\n")
    return trace_path, truth_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="recordings to make (default: all)")
    parser.add_argument("--list", action="store_true", help="list the recordings and exit")
    parser.add_argument("--table", action="store_true",
                        help="print every recording's truth beside its report as one Markdown table, and exit")
    parser.add_argument("--truth-only", action="store_true",
                        help="derive the truth files again from the raw events they hold (no recording)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the files go (default {OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    known = recordings()
    if args.list:
        for r in known:
            print(f"{r.name:44} {r.folder.name}/{r.script} {' '.join(r.args)}")
        return 0
    unknown = set(args.names) - {r.name for r in known}
    if unknown:
        parser.error(f"no recording named {', '.join(sorted(unknown))} (--list shows them)")
    chosen = [r for r in known if not args.names or r.name in args.names]
    if args.table:
        print(side_by_side([args.out / f"{r.name}.truth.json" for r in chosen if (args.out / f"{r.name}.truth.json").is_file()]))
        return 0
    if args.truth_only:
        for rec in chosen:
            path = args.out / f"{rec.name}.truth.json"
            if path.is_file():
                path.write_text(json.dumps(ground_truth.recompute(json.loads(path.read_text()), rec.meta()), indent=1) + "\n")
                print(summary(args.out / f"{rec.name}.jsonl", path))
        return 0
    failures = 0
    for rec in chosen:
        try:
            trace_path, truth_path = record(rec, args.out)
        except Exception as exc:  # one framework's failure does not stop the others
            failures += 1
            print(f"FAILED {exc}", file=sys.stderr)
            continue
        print(summary(trace_path, truth_path))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
