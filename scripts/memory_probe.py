#!/usr/bin/env python3
"""Time the memory store on this machine: storing one fact (its own transaction) and a BM25
search, over a file of N facts. Prints p50 and p95 in ms. Usage: memory_probe.py [N]"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from agenttrace.runtime.memory import MemoryStore

WORDS = ("alpha beta gamma delta locker code parking spot meeting room budget invoice server outage paris rome "
         "berlin cairo tokyo").split()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rnd = random.Random(0)
    with tempfile.TemporaryDirectory() as folder:
        store = MemoryStore(Path(folder) / "memory.sqlite")
        store.add_many(" ".join(rnd.choice(WORDS) for _ in range(12)) + f" {i}" for i in range(n))
        for name, op in (("store one fact", lambda i: store.add(f"fact number {i} about parking")),
                         ("search (3 best)", lambda i: store.search("where is the parking spot for the meeting",
                                                                    limit=3))):
            times = []
            for i in range(200):
                t = time.perf_counter()
                op(i)
                times.append(time.perf_counter() - t)
            times.sort()
            print(f"{name} over {n} facts: p50 {1e3 * times[100]:.2f} ms, p95 {1e3 * times[190]:.2f} ms")


if __name__ == "__main__":
    main()
