"""The child side of `agenttrace run`: OpenTelemetry set up inside a program that has none.

`agenttrace run` puts this folder first on the program's PYTHONPATH, so Python imports this file
as `sitecustomize` before the program starts (site.py does that for every interpreter that does
not run with -S, -I or -E). The program may run in another environment than agenttrace's, with
its own pinned OpenTelemetry: so this module imports only the standard library and
OpenTelemetry, never agenttrace, and needs only `opentelemetry-sdk` and
`opentelemetry-exporter-otlp-proto-http` (which brings the SDK) in the program's environment.
Without them it says so in one line on stderr and the program runs untraced.

What it does, configured by the parent through the AGENTTRACE_RUN_* variables below:
- sets the global TracerProvider (service.name: --service, else OTEL_SERVICE_NAME, else the
  script's name) with a batch processor exporting OTLP/HTTP protobuf to the parent's loopback
  receiver, and one to the user's --otlp URL when given;
- turns on every installed instrumentation with that provider, when the program first imports
  the library it instruments (`_agenttrace_instrument.py`, beside this file: entry points, and
  the frameworks' own switches that have none);
- flushes and shuts down at exit and on SIGTERM, so that the spans of a program that ends in an
  exception, on Ctrl-C or on SIGTERM still arrive;
- then runs the `sitecustomize` it shadows, if there is one further along sys.path.

Telemetry never breaks the program: every failure here is logged (or, for a missing SDK, said
once) and the program runs on. `profile()` imports this module in-process for `make_provider`
and `script_name`; importing it under its package name sets nothing up.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import signal
import sys
import threading
from typing import Any, Callable

ENDPOINT_ENV = "AGENTTRACE_RUN_ENDPOINT"  # the parent's receiver: an OTLP/HTTP traces URL on loopback
OTLP_ENV = "AGENTTRACE_RUN_OTLP"  # the user's --otlp traces URL, when given
SERVICE_ENV = "AGENTTRACE_RUN_SERVICE"  # --service, when given
RUN_ID_ENV = "AGENTTRACE_RUN_ID"  # one id for every process of one `agenttrace run`
# Set by a bootstrapped process for the processes it starts: they are traced too, but one line
# about a missing SDK is enough (the first process already said it for the environment).
NESTED_ENV = "AGENTTRACE_RUN_NESTED"
STARTED_ENV = "AGENTTRACE_RUN_STARTED"  # the pid that set tracing up: another copy of this file chained to stands down
EXPORTER_PACKAGE = "opentelemetry-exporter-otlp-proto-http"
SHUTDOWN_BOUND_S = 3.0  # the most exit waits for the user's collector; the loopback receiver is waited for in full
LOCAL_QUEUE = 65_536  # the loopback queue never drops a burst (the SDK default is 2048)
LOCAL_DELAY_MS = 500  # loopback batches every half second: little is lost even to SIGKILL

_log = logging.getLogger("agenttrace.bootstrap")


# -- the provider --------------------------------------------------------------------------
def script_name() -> str:
    """The program's name for service.name: the script's stem, the module of `-m`, else `python`."""
    first = sys.argv[0] if sys.argv else ""
    if first == "-m":  # at this point sys.argv[0] is "-m"; the module's name is in the full command line
        argv = list(getattr(sys, "orig_argv", []))
        return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else "python"
    if first in ("", "-c", "-"):
        return "python"
    base = os.path.basename(first)
    return base[:-3] if base.endswith(".py") else base


def service_name() -> str:
    return os.environ.get(SERVICE_ENV) or os.environ.get("OTEL_SERVICE_NAME") or script_name()


def make_provider(service: str, run_id: str | None) -> Any:
    """An SDK TracerProvider with the run's resource; OTEL_RESOURCE_ATTRIBUTES and the sampler
    variables apply as the SDK reads them. Our exit hook replaces the SDK's, which would wait on
    a dead collector for its whole timeout."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    attrs: dict[str, Any] = {"service.name": service, "process.pid": os.getpid()}
    if run_id:
        attrs["agenttrace.run.id"] = run_id
    return TracerProvider(resource=Resource.create(attrs), shutdown_on_exit=False)


def add_exporters(provider: Any, endpoint: str, otlp: str | None) -> tuple[Any, Any | None]:
    """(loopback processor, user's processor or None), each added to `provider`: one batch
    processor per destination, so a slow collector never delays the receiver's copy."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    local = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, compression=Compression.NoCompression),
                               max_queue_size=LOCAL_QUEUE, schedule_delay_millis=LOCAL_DELAY_MS)
    provider.add_span_processor(local)
    remote = None
    if otlp:
        remote = BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp))
        provider.add_span_processor(remote)
    return local, remote


def close(local: Any, remote: Any | None, bound_s: float = SHUTDOWN_BOUND_S) -> None:
    """Flush and shut both processors: the loopback one in full, the user's collector for at
    most `bound_s` (on a daemon thread, so a dead collector cannot hold the exit). Never raises."""
    try:
        local.shutdown()
    except Exception:  # telemetry never breaks the program
        _log.warning("agenttrace: flushing spans to `agenttrace run` failed", exc_info=True)
    if remote is not None:
        thread = threading.Thread(target=_quietly, args=(remote.shutdown,), name="agenttrace-otlp-shutdown", daemon=True)
        thread.start()
        thread.join(bound_s)
        if thread.is_alive():
            _log.warning("agenttrace: the OTLP collector took longer than %.0f s at exit; the spans it has not "
                         "acknowledged are left (the trace file of `agenttrace run` has them all)", bound_s)


def _quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:
        _log.warning("agenttrace: shutting the OTLP exporter down failed", exc_info=True)


# -- process lifetime ----------------------------------------------------------------------
def on_exit(local: Any, remote: Any | None) -> None:
    """Close the processors at exit (registered before the program's own hooks, so it runs after
    them: spans they end are sent too) and on SIGTERM when the program has no handler of its own."""
    atexit.register(close, local, remote)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        def on_sigterm(signum: int, frame: Any) -> None:
            # on a helper thread, bounded: the signal may have come while this thread held the
            # exporter's lock, and waiting on it here would never end
            thread = threading.Thread(target=close, args=(local, remote), name="agenttrace-sigterm", daemon=True)
            thread.start()
            thread.join(SHUTDOWN_BOUND_S + 2)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # then end as SIGTERM ends it
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)


def start() -> None:
    """Set everything up for this process (the parent's variables say where spans go)."""
    endpoint = os.environ.get(ENDPOINT_ENV)
    nested = os.environ.get(NESTED_ENV) == "1"
    os.environ[NESTED_ENV] = "1"
    if not endpoint or os.environ.get(STARTED_ENV) == str(os.getpid()):  # a second bootstrap chained to
        return
    os.environ[STARTED_ENV] = str(os.getpid())
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: F401
        from opentelemetry.sdk.trace import TracerProvider  # noqa: F401
    except ImportError as exc:
        if not nested:
            print(f"agenttrace run: {script_name()} runs untraced: this Python ({sys.executable}) cannot import "
                  f"{exc.name or exc}; install the exporter (it brings the SDK) there: "
                  f"{sys.executable} -m pip install {EXPORTER_PACKAGE}", file=sys.stderr)
        return
    provider = make_provider(service_name(), os.environ.get(RUN_ID_ENV))
    local, remote = add_exporters(provider, endpoint, os.environ.get(OTLP_ENV) or None)
    trace.set_tracer_provider(provider)
    on_exit(local, remote)
    import _agenttrace_instrument as instrumentations  # beside this file, on sys.path in the child only

    done = instrumentations.instrument_installed(provider)
    native = instrumentations.enable_native(provider)
    _log.debug("agenttrace: instrumented %s; on import: %s; native %s; skipped %s; conflicts %s; failed %s",
               done.on, done.waiting, native, done.skipped, done.conflicts, done.failed)


def chain() -> None:
    """Run the `sitecustomize` this one shadows (the next on sys.path), as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # imported by site.py; under its package name it only defines
    try:
        start()
    except Exception as _exc:  # telemetry never breaks the program
        _log.warning("agenttrace: setting up tracing failed (%s: %s); the program runs untraced",
                     type(_exc).__name__, _exc, exc_info=True)
    chain()
