"""Which generation backend to run on this machine, decided by measuring the caller's workload.

The torch backend and llama.cpp's kernels (llama_backend.py) trade places with the machine: on
this project's 2-core AVX2 CPU llama.cpp decodes 1.5-1.8x faster but prefills a Q4_1 prompt
slower and runs neither the trained heads nor the batching engine, so which one reaches tool calls
sooner depends on the prompts, the drafter and the cores. `choose_backend` times a workload on
each available backend (interleaved, A B B A, so both see the same drift), keeps the answer in
agenttrace's cache per workload and machine, and says why; later runs read it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from agenttrace.clock import Clock, default_clock, elapsed_s

__all__ = ["BACKENDS", "BackendChoice", "available_backends", "choose_backend"]

_log = logging.getLogger(__name__)
BACKENDS = ("torch", "llama.cpp")
_STORE = "backend-choice.json"


@dataclass(frozen=True)
class BackendChoice:
    backend: str
    seconds: dict[str, float]  # the workload's median time per backend measured (empty: none was)
    cached: bool  # read from the cache, measured by an earlier run on this machine
    reason: str

    def describe(self) -> str:
        if len(self.seconds) < 2:
            return f"{self.backend} ({self.reason})"
        times = ", ".join(f"{b} {s:.2f} s" for b, s in sorted(self.seconds.items(), key=lambda kv: kv[1]))
        when = "measured earlier on this machine" if self.cached else "measured now"
        return f"{self.backend}: the faster here ({times}; {when})"


def available_backends() -> tuple[str, ...]:
    """The backends this installation can run: llama.cpp's needs the `llamacpp` extra."""
    return BACKENDS if importlib.util.find_spec("llama_cpp_py_sync") is not None else ("torch",)


def _machine() -> str:
    import torch

    from agenttrace.generation.ceiling import cpu_name
    from agenttrace.generation.llama_kernels import library_version

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no gpu"  # where torch's backend runs
    return (f"{platform.machine()}|{cpu_name()}|{os.cpu_count()}|{torch.get_num_threads()}|{torch.__version__}|"
            f"{gpu}|{library_version()}")


def choose_backend(workload: str, measure: Callable[[str], None], *, prepare: Callable[[str], None] | None = None,
                   repeats: int = 2, clock: Clock | None = None, refresh: bool = False) -> BackendChoice:
    """The backend on which `measure(backend)` (one run of the caller's workload there) takes
    least time, median of `repeats` runs each in A B B A order, after `prepare(backend)` (loading
    its model: not timed) when given; kept in the cache under
    `workload` and this machine (CPU, cores, torch threads and versions) unless `refresh`. A
    backend whose run raises loses, and the reason says so; with one backend available there is
    nothing to measure."""
    from agenttrace.generation.cache import read_json, write_json

    backends = available_backends()
    if len(backends) == 1:
        return BackendChoice(backends[0], {}, False, "llama.cpp's kernels need the llamacpp extra")
    key = f"{workload}|{_machine()}"
    known = read_json(_STORE)
    if not refresh and key in known and known[key].get("backend") in backends:
        hit = known[key]
        return BackendChoice(hit["backend"], hit["seconds"], True, hit["reason"])
    clock = clock if clock is not None else default_clock()
    runs: dict[str, list[float]] = {b: [] for b in backends}
    failed: dict[str, str] = {}
    for backend in backends if prepare is not None else ():
        try:
            prepare(backend)
        except Exception as exc:  # noqa: BLE001  (a backend that cannot load loses)
            failed[backend] = f"{type(exc).__name__}: {exc}"
    for i in range(repeats):
        for backend in backends if i % 2 == 0 else tuple(reversed(backends)):
            if backend in failed:
                continue
            start = clock.now_ns()
            try:
                measure(backend)
            except Exception as exc:  # noqa: BLE001  (a backend that cannot run this workload loses)
                failed[backend] = f"{type(exc).__name__}: {exc}"
                continue
            runs[backend].append(elapsed_s(clock, start))
    seconds = {b: statistics.median(r) for b, r in runs.items() if r}
    if not seconds:
        raise RuntimeError(f"no backend ran the {workload} workload: {failed}")
    best = min(seconds, key=seconds.get)
    reason = f"median of {repeats} runs each of {workload}"
    if failed:
        reason += "; " + "; ".join(f"{b} failed ({why})" for b, why in failed.items())
    known[key] = {"backend": best, "seconds": seconds, "reason": reason}
    if not write_json(_STORE, known):  # a read-only cache: the next run measures again
        _log.info("could not keep the backend choice in agenttrace's cache (%s)", _STORE)
    return BackendChoice(best, seconds, False, reason)
