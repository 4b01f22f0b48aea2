"""What a harness run measures and how big it is: the one record every part of the harness reads.

Saved in the output folder's manifest, so a resumed run checks that it continues the same
measurement (a different size or arm set would mix two experiments in one table).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

SUITES = ("tool_calls", "long_reasoning", "code", "multilingual")
# Run only when named (`--suites long_horizon`): its compaction tasks prefill about 15,000 tokens
# each, a minute per task run on a 2-core CPU.
OPT_IN_SUITES = ("long_horizon",)
ARMS = ("baseline", "prompt_lookup", "early_exit")
SCENARIOS = ("cold_start", "cancellation", "concurrency", "drafter_failure", "hanging_tool")


@dataclass(frozen=True)
class HarnessOptions:
    suites: tuple[str, ...] = SUITES
    arms: tuple[str, ...] = ARMS  # the first is the baseline every other arm is compared with
    tasks_per_suite: int = 4  # tasks of each suite per repeat; repeats walk on through the suite
    repeats: int = 3
    seed: int = 0  # task order within a suite, arm order per task
    device: str = "cpu"
    model: str | None = None  # None: the bundled SmolLM2-135M-Instruct
    dtype: str = "float32"
    quantize: str | None = None  # "int8" / "int4": weight-only quantized linear layers (generation/quantize.py)
    backend: str = "torch"  # or "llama.cpp": the model's GGUF on llama.cpp's kernels (generation/llama_backend.py)
    compiled: bool = False  # every arm decodes through torch.compile graphs over a static cache (compiled.py)
    # torch intra-op threads; None: torch's default (one per core). On a machine whose cores other
    # processes also use, 2 threads on 2 cores ran 5x slower than 1 (OpenMP threads wait for each
    # other), so a shared machine is measured with 1.
    threads: int | None = None
    max_steps: int | None = None  # None: each suite's own budget
    task_deadline_s: float = 60.0  # wall-clock budget per task (a failing chain can loop for minutes)
    max_tokens: int = 64  # per generation, as the reference agent (a suite may give its agent more)
    prefix_cache_mb: int = 256  # per arm (and per concurrent agent); 0 turns prefix caching off for every arm
    prompt_lookup_k: int = 8  # the most tokens one round drafts (adaptive k chooses fewer)
    early_exit_layers: int = 8
    early_exit_k: int = 4
    eagle_k: int = 4  # the EAGLE arms' deepest draft (tree depth, or chain length)
    # Scenario settings may change between sessions of one output folder: a scenario whose
    # settings changed is measured again, the suite runs stay (compare=False).
    scenarios: tuple[str, ...] = field(default=SCENARIOS, compare=False)
    concurrency: tuple[int, ...] = field(default=(1, 2, 4, 8), compare=False)
    concurrency_tasks: int = field(default=8, compare=False)  # tasks per concurrency level and arm
    drafter_failure_tasks: int = field(default=4, compare=False)  # tasks run with the failing drafter
    cold_start_repeats: int = field(default=2, compare=False)  # warm-cache starts per arm
    cold_cache: bool = field(default=True, compare=False)  # also start once with an empty model cache (~30 s more)
    out: Path = field(default=Path("traces/bench"), compare=False)

    @property
    def baseline(self) -> str:
        return self.arms[0]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["out"] = str(self.out)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HarnessOptions:
        known = {f.name for f in fields(cls)}
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known}
        values["out"] = Path(values.get("out", "traces/bench"))
        return cls(**values)

    def differences(self, other: HarnessOptions) -> list[str]:
        """The settings that differ (the output folder aside), as `name: old -> new`."""
        return [
            f"{f.name}: {getattr(other, f.name)!r} -> {getattr(self, f.name)!r}"
            for f in fields(self)
            if f.compare and getattr(self, f.name) != getattr(other, f.name)
        ]


def quick(opts: HarnessOptions) -> HarnessOptions:
    """The smoke configuration CI runs: two tasks per suite, one repeat, small scenarios, no
    cold-cache start (its GGUF conversion alone takes half a minute)."""
    return replace(
        opts, tasks_per_suite=2, repeats=1, concurrency=(1, 2), concurrency_tasks=2, drafter_failure_tasks=2,
        cold_start_repeats=1,
        # max_steps bounds each task; a short wall-clock deadline would make outcomes (and texts cut
        # at it) depend on how busy the machine is: one arm cut, the other not, reads as a changed output
        cold_cache=False, task_deadline_s=180.0, max_steps=3,
    )
