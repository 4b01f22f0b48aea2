"""`agenttrace serve`: an OpenAI-compatible chat-completions server over our generator."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve", help="OpenAI-compatible chat-completions server (streaming, tools) over our speculative generator"
    )
    serve.add_argument("--model", default="bundled", help="bundled (SmolLM2-135M-Instruct), a folder or a hub name")
    serve.add_argument("--served-model-name", default=None, help="the model name clients ask for (default: the model's)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--no-speculative", action="store_true", help="plain decoding instead of prompt lookup")
    serve.add_argument("-k", type=int, default=8, help="most draft tokens per speculation round (adaptive; default 8)")
    serve.add_argument("--constrained", action="store_true",
                       help="constrain tool_choice \"auto\" requests to a tool call or an answer too (tool_choice "
                            "\"required\", a named tool and response_format json_schema are always constrained)")
    serve.add_argument("--max-batch", type=int, default=8,
                       help="requests generated together in one continuous batch (default 8; 1: one at a time)")
    serve.add_argument("--no-prefix-cache", action="store_true", help="prefill every request's whole prompt")
    serve.add_argument("--trace-file", default=None, help="also write the server's spans to this OTLP/JSON lines file")
    serve.add_argument(
        "--otlp", nargs="?", const="", default=None, metavar="URL",
        help="also export over OTLP (default http://localhost:4318; OTEL_EXPORTER_OTLP_* apply)",
    )
    serve.add_argument("--service-name", default="agenttrace-serve", help="service.name of the server's spans")
    serve.add_argument("--device", default="cpu", help="torch device (default cpu)")
    limits = serve.add_argument_group("limits (a request over one is refused with an OpenAI error body)")
    limits.add_argument(
        "--max-body-bytes", type=_positive, default=1 << 20, metavar="N",
        help="largest request body; larger is answered 413 (default 1048576, 1 MiB)",
    )
    limits.add_argument(
        "--max-prompt-tokens", type=_positive, default=None, metavar="N",
        help="longest prompt, in tokens; longer is answered 400 (default: the model's context, at most 8192)",
    )
    limits.add_argument(
        "--max-tokens-cap", type=_positive, default=4096, metavar="N",
        help="most completion tokens a request may ask for (max_tokens); more is answered 400 (default 4096)",
    )
    serve.set_defaults(func=run)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C before the server was up (a running one stops cleanly)
        print("agenttrace serve: interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from agenttrace.errors import ModelUnavailable
    from agenttrace.generation.models import load_model
    from agenttrace.serve.server import ServeLimits, ServeOptions, build_engine, serve_forever
    from agenttrace.telemetry import Telemetry

    try:
        loaded = load_model(args.model, device=args.device)
    except ModelUnavailable as exc:
        print(f"agenttrace serve: {exc}", file=sys.stderr)
        return 2
    limits = ServeLimits(
        max_body_bytes=args.max_body_bytes, max_prompt_tokens=args.max_prompt_tokens, max_tokens=args.max_tokens_cap
    )
    telemetry = Telemetry(
        service_name=args.service_name, trace_file=args.trace_file, otlp_endpoint=args.otlp, run_label="serve"
    )
    options = ServeOptions(
        speculative=not args.no_speculative,
        num_speculative_tokens=args.k,
        prefix_cache=not args.no_prefix_cache,
        served_name=args.served_model_name,
        constrained=args.constrained,
        max_batch=max(1, args.max_batch),
    )
    try:
        serve_forever(build_engine(loaded, telemetry, options), args.host, args.port, limits=limits)
        print("agenttrace serve: stopped", file=sys.stderr)
    except OSError as exc:
        print(f"agenttrace serve: {exc}", file=sys.stderr)
        return 2
    finally:
        telemetry.shutdown()
    return 0
