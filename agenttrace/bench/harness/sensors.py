"""Memory and energy around one measured piece of work, from whatever sensors the machine has.

    peak RSS     Linux: VmHWM of /proc/self/status, reset before each piece by writing 5 to
                 /proc/self/clear_refs, so each task run gets its own peak; elsewhere the
                 process's lifetime peak (getrusage), which can only grow
    GPU memory   torch.cuda.max_memory_allocated after reset_peak_memory_stats (CUDA only)
    energy       NVML's total energy counter (mJ since the driver loaded; Volta and later),
                 read before and after, only when `pynvml` (nvidia-ml-py) is importable

A sensor that is missing is reported as such ("no sensor"), never as zero.
"""

from __future__ import annotations

import logging
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

_log = logging.getLogger(__name__)

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass(frozen=True)
class ResourceUse:
    """What one piece of work used; None: no sensor for it."""

    peak_rss_bytes: int | None
    peak_gpu_bytes: int | None
    energy_j: float | None


def _status_kib(key: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def current_rss_bytes() -> int | None:
    """Resident memory now (Linux), or None."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def _lifetime_peak_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def release_free_memory() -> None:
    """Hand memory the allocator holds but no object uses back to the system (glibc's
    malloc_trim; nothing elsewhere). Between measurements: each thread that allocates gets a
    glibc arena of its own, and what a level of N agent threads freed stayed in them, so the
    concurrency scenario's resident memory grew level after level (2.3 GB over four levels of 8
    agents on the bundled model, flat with a trim after each) and the next level's peak RSS
    counted the last one's garbage."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to trim
        pass


class ResourceMeter:
    """Measures `ResourceUse` between `start()` and `stop()`; the sensors are probed once.

    Not for concurrent use: the peaks are the process's (or device's), so two overlapping
    measurements would see each other's memory.
    """

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.rss_resettable = self._try_reset_rss()
        self.cuda = device.startswith("cuda")
        self._nvml_handle = self._open_nvml() if self.cuda else None
        self._energy_start: float | None = None

    # -- probing ---------------------------------------------------------------------------
    @staticmethod
    def _try_reset_rss() -> bool:
        try:
            _CLEAR_REFS.write_text("5")
        except OSError:
            return False
        return _status_kib("VmHWM") is not None

    def _open_nvml(self):
        try:
            import pynvml  # nvidia-ml-py: optional, never needed on a CPU
        except ImportError:
            return None
        try:
            import torch

            pynvml.nvmlInit()
            index = torch.device(self.device).index or 0
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # raises on GPUs without the counter
            return handle
        except Exception as exc:  # NVML missing from the driver, an old GPU: report "no sensor"
            _log.info("NVML energy counter unavailable: %r", exc)
            return None

    def _energy_mj(self) -> float | None:
        if self._nvml_handle is None:
            return None
        import pynvml

        try:
            return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(self._nvml_handle))
        except Exception:
            return None

    @property
    def sensors(self) -> dict[str, str]:
        """What each figure is read from, for the report."""
        return {
            "peak RSS": "VmHWM, reset per task run" if self.rss_resettable else "getrusage: the process's lifetime peak",
            "GPU memory": "torch.cuda.max_memory_allocated" if self.cuda else "no sensor (CPU run)",
            "energy": "NVML total energy counter" if self._nvml_handle is not None else "no sensor",
        }

    # -- measuring -------------------------------------------------------------------------
    def start(self) -> None:
        if self.rss_resettable:
            try:
                _CLEAR_REFS.write_text("5")
            except OSError:
                self.rss_resettable = False
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self._energy_start = self._energy_mj()

    def stop(self) -> ResourceUse:
        kib = _status_kib("VmHWM") if self.rss_resettable else None
        rss = kib * 1024 if kib is not None else _lifetime_peak_bytes()
        gpu = None
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            gpu = int(torch.cuda.max_memory_allocated())
        end = self._energy_mj()
        energy = (end - self._energy_start) / 1e3 if end is not None and self._energy_start is not None else None
        return ResourceUse(rss, gpu, energy)
