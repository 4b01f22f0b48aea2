"""`agenttrace demo`: the reference agent on the bundled model (the README's main job).

A plug-in command: pyproject.toml lists `register` under the `agenttrace.commands` entry points,
so the command line finds it without the library importing its own examples."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="run the reference agent on the bundled model, write a trace, print the report")
    demo.add_argument("--tasks", type=int, default=12, help="how many tasks of the task set to run (default 12)")
    demo.add_argument(
        "--suite", default="tool_calls",
        help="the task set and its agent (agents/suites.py): tool_calls (default), long_reasoning, code, multilingual, "
        "long_horizon (memory, compaction of long documents, delegation to sub-agents)",
    )
    demo.add_argument(
        "--arms", default="speculative",
        help="comma-separated: baseline (plain decoding), speculative (--drafter); "
        "several arms run interleaved and are compared (default speculative)",
    )
    demo.add_argument(
        "--drafter", choices=("lookup", "eagle", "lookup+eagle"), default="lookup+eagle",
        help="the speculative arm's drafter: prompt lookup, the trained EAGLE head's draft trees (shipped for the "
        "bundled model), or prompt lookup where it matches and EAGLE elsewhere (default)",
    )
    demo.add_argument("-k", type=int, default=8, help="most draft tokens per speculation round; k adapts (default 8)")
    demo.add_argument("--no-prefix-cache", action="store_true", help="prefill every call's whole prompt")
    demo.add_argument("--trace-dir", default="traces", help="where trace files go (default traces/)")
    demo.add_argument(
        "--otlp", nargs="?", const="", default=None, metavar="URL",
        help="also export over OTLP (bare flag: OTEL_EXPORTER_OTLP_ENDPOINT, else Jaeger on "
        "http://localhost:4318, or :4317 with --otlp-protocol grpc)",
    )
    demo.add_argument(
        "--otlp-protocol", choices=("http/protobuf", "grpc"), default=None,
        help="OTLP transport (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)",
    )
    demo.add_argument("--detail", choices=("default", "fine"), default="default",
                      help="fine: draft/verify spans per round instead of span events")
    demo.add_argument("--metrics", action="store_true",
                      help="also record the GenAI client metrics (gen_ai.client.operation.duration, "
                           "gen_ai.client.token.usage) beside each trace file and to OTLP")
    demo.add_argument("--constrained", action="store_true",
                      help="decode every reply under the grammar of a tool call or an answer (llguidance): "
                           "valid JSON naming a real tool with schema-valid arguments, by construction")
    demo.add_argument("--quantize", choices=("int4", "int8"), default=None,
                      help="weight-only quantized linear layers with bf16 activations (int4: about 2x faster decoding "
                           "here); quantized once, then loaded from the cache")
    demo.add_argument("--backend", choices=("auto", "torch", "llama.cpp"), default="auto",
                      help="where the model runs: torch, llama.cpp's kernels on the GGUF itself (the llamacpp extra; "
                           "prompt-lookup drafting), or auto (default): the one measured faster on this machine for "
                           "this demo, once (about 20 s), then read from the cache")
    demo.add_argument("--summary-only", action="store_true", help="print only the run summary")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agenttrace.examples.agents.demo import ARMS, SUITE_NAMES, DemoOptions, run_demo

    arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"agenttrace demo: unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    if args.suite not in SUITE_NAMES:
        raise SystemExit(f"agenttrace demo: unknown suite {args.suite!r}; choose from {', '.join(SUITE_NAMES)}")
    run_demo(
        DemoOptions(
            suite=args.suite,
            tasks=args.tasks,
            arms=arms,
            num_speculative_tokens=args.k,
            prefix_cache=not args.no_prefix_cache,
            trace_dir=Path(args.trace_dir),
            otlp_endpoint=args.otlp,
            otlp_protocol=args.otlp_protocol,
            detail=args.detail,
            show_tasks=not args.summary_only,
            metrics=args.metrics,
            constrained=args.constrained,
            quantize=args.quantize,
            backend=args.backend,
            drafter=args.drafter,
        )
    )
    return 0
