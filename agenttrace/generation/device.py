"""The device a model runs on: what waits for its queued work, a clock that synchronises with
it (so GPU timers measure kernels, not launches), and its measured peaks for the roofline."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from agenttrace.clock import Clock, SyncedClock, default_clock, with_sync
from agenttrace.generation.ceiling import MachinePeaks, machine_peaks
from agenttrace.generation.models import cache_dir

__all__ = ["device_clock", "device_peaks", "device_sync"]


@functools.cache
def _peaks(device: str, threads: int) -> MachinePeaks | None:
    """This machine's measured peaks at `threads` intra-op threads (the caller's count: the key
    of the memo) from ceiling.machine_peaks: its disk cache, or a probe of about a second the
    first time on a machine; once per process. None when the probe fails."""
    try:
        return machine_peaks(cache_dir(), device)
    except Exception:  # a roofline without peaks still has its intensities
        return None


def device_peaks(device: torch.device | str) -> MachinePeaks | None:
    """The peaks of `device` (a CPU's at the calling thread's torch thread count)."""
    device = torch.device(device)
    return _peaks("cuda" if device.type == "cuda" else "cpu", torch.get_num_threads())


def device_sync(device: torch.device | str) -> Callable[[], None] | None:
    """What waits for the work queued on `device`: `torch.cuda.synchronize` on CUDA, None on a
    CPU (its operations finish before they return)."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return None


def device_clock(device: torch.device | str, base: Clock | None = None) -> Clock:
    """`base` (the shared clock by default), synchronising with the GPU before each reading when
    on CUDA, so draft and verify times measure the kernels rather than their launch; `base`
    itself on a CPU, or when it synchronises already (a bench's clock bound into its models)."""
    base = base if base is not None else default_clock()
    if isinstance(base, SyncedClock):
        return base  # wrapping it again would wait for the device twice per reading
    return with_sync(base, device_sync(device))
