"""llama.cpp as a peer arm of `agenttrace bench generation`: the same GGUF file, the same prompt
token ids (its vocabulary is the one our tokenizer was converted from), the same threads, greedy.

llama-cpp-python lives in its own venv (scripts/llama_cpp.sh builds it, once: PyPI ships only its
source), found at $AGENTTRACE_LLAMA_VENV or `.venv-llama` beside the project's `.venv`; it runs as
a worker process (llama_worker.py) that the bench talks to over pipes, so the bench's own process
never loads it and the test suite never needs it. Arms: `llama_cpp` (plain decoding) and
`llama_cpp_lookup` (its bindings' prompt-lookup speculation, `LlamaPromptLookupDecoding`, 10
tokens per draft).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["LLAMA_ARMS", "LlamaPeer", "find_llama_python"]

LLAMA_ARMS = ("llama_cpp", "llama_cpp_lookup")
_WORKER = Path(__file__).with_name("llama_worker.py")


def find_llama_python() -> Path:
    """The llama venv's python; SystemExit saying how to build it when there is none."""
    env = os.environ.get("AGENTTRACE_LLAMA_VENV")
    candidates = [Path(env)] if env else [Path(sys.prefix).parent / ".venv-llama", Path.cwd() / ".venv-llama"]
    for venv in candidates:
        python = venv / "bin" / "python"
        if python.is_file():
            return python
    raise SystemExit(
        "the llama_cpp arms need llama-cpp-python in its own venv: run scripts/llama_cpp.sh once (about 15 minutes "
        f"on 2 cores), or point AGENTTRACE_LLAMA_VENV at one; looked in {', '.join(str(c) for c in candidates)}"
    )


class LlamaPeer:
    """One worker process serving both llama arms."""

    def __init__(self, gguf: Path, threads: int, context: int = 2048) -> None:
        python = find_llama_python()
        self._proc = subprocess.Popen(
            [str(python), str(_WORKER), str(gguf), str(threads), str(context)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self.gguf = gguf
        # The worker loads the lookup arm's second instance on its first lookup request, so the
        # plain arm's peak is the one seen before that; the lookup arm's counts both instances.
        self.peak_rss_mb = {False: 0.0, True: 0.0}
        self._lookup_loaded = False
        ready = self._proc.stdout.readline() if self._proc.stdout else ""
        if not ready:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            raise SystemExit(f"the llama.cpp worker ({python}) did not start: {err.strip()[-800:]}")

    def generate(self, ids: list[int], budget: int, stop: list[int], lookup: bool) -> dict:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"ids": ids, "budget": budget, "stop": stop, "lookup": lookup}) + "\n")
        line = self._proc.stdout.readline()
        if not line:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            raise RuntimeError(f"the llama.cpp worker exited: {err.strip()[-800:]}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"llama.cpp failed on a prompt: {reply['error']}")
        self._lookup_loaded = self._lookup_loaded or lookup
        if not self._lookup_loaded:
            self.peak_rss_mb[False] = max(self.peak_rss_mb[False], reply["peak_rss_mb"])
        self.peak_rss_mb[True] = max(self.peak_rss_mb[True], reply["peak_rss_mb"])
        return reply

    def arm(self, stop: list[int], lookup: bool):
        """The bench's arm callable (ids, budget) -> Run over this worker."""
        from agenttrace.bench.generation_records import Run

        def run(ids: list[int], budget: int) -> Run:
            r = self.generate(ids, budget, stop, lookup)
            return Run(r["e2e_s"], r["decode_s"], list(r["tokens"]))

        return run

    def step_bytes(self, ours, our_itemsize: int):
        """Bytes of one llama.cpp decode step: the GGUF's size (every tensor is read once a step,
        its tied embedding table being the output head) and our KV per token at fp16, the KV
        type llama.cpp keeps by default."""
        from agenttrace.generation.ceiling import StepBytes

        return StepBytes(weights=self.gguf.stat().st_size, kv_per_token=ours.kv_per_token * 2 // our_itemsize)

    def close(self) -> None:
        if self._proc.poll() is None:
            if self._proc.stdin:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
