"""Inputs that mix our traces with spans the queries do not state, for the columnar engine's
benchmark (BENCHMARKS.md, issue 32's seventh part), and the timing of one report of them.

    python scripts/mixed_traces.py foreign COPIES OUT    # traces/frameworks/*.jsonl, COPIES times, fresh trace ids
    python scripts/mixed_traces.py own IN OUT SHARE      # IN with a child span of no convention under SHARE of its spans
    python scripts/mixed_traces.py time FILE columnar|python [--sample N] [--store chdb:DIR]

`time` prints the seconds of one report in this process (a fresh process each run: run it under
`/usr/bin/time -f %M` for the peak): the columnar engine's (`report_files`, or `report_store` with
--store) or the per-span path's (`report_streamed`, or `report_clickhouse`), 2 threads.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("load_config", "db lookup", "cache.get")


def foreign(copies: int, out: Path) -> None:
    rng = random.Random(7)
    lines = [line for f in sorted((ROOT / "traces" / "frameworks").glob("*.jsonl"))
             for line in f.read_text().splitlines() if line.strip()]
    with out.open("w") as w:
        for _ in range(copies):
            ids: dict[str, str] = {}
            for line in lines:
                doc = json.loads(line)
                for s in (s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]):
                    if s["traceId"] not in ids:
                        ids[s["traceId"]] = f"{rng.getrandbits(128):032x}"
                    s["traceId"] = ids[s["traceId"]]
                w.write(json.dumps(doc) + "\n")


def own(src: Path, out: Path, share: float) -> None:
    rng = random.Random(1)
    with src.open() as r, out.open("w") as w:
        for line in r:
            if not line.strip():
                continue
            doc = json.loads(line)
            for ss in (ss for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]):
                extra = []
                for s in ss["spans"]:
                    if rng.random() < share:
                        start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
                        extra.append({"traceId": s["traceId"], "spanId": f"{rng.getrandbits(64):016x}",
                                      "parentSpanId": s["spanId"], "name": rng.choice(NAMES), "kind": 1,
                                      "startTimeUnixNano": str(start + (end - start) // 4),
                                      "endTimeUnixNano": str(start + (end - start) // 2), "attributes": []})
                ss["spans"] += extra
            w.write(json.dumps(doc, separators=(",", ":")) + "\n")


def timed(path: str, how: str, sample: int | None, store: str | None) -> None:
    start = time.perf_counter()
    if store:
        from agenttrace.traces.clickhouse import ClickHouseQuery

        query = ClickHouseQuery(store)
    if how == "columnar":
        from agenttrace.columnar.engine import report_files, report_store

        outcome = (report_store(query, threads=2, sample=sample) if store else
                   report_files([path], threads=2, sample=sample))
        report, extra = outcome.report, f"reason={outcome.reason} per_trace_spans={outcome.per_trace_spans}"
    else:
        from agenttrace.report.build import report_clickhouse, report_streamed

        report = report_clickhouse(query, sample=sample) if store else report_streamed([path], sample=sample)
        extra = ""
    tasks = report.run.tasks if report is not None else None
    print(f"{how} {store or path}: {time.perf_counter() - start:.2f} s, {tasks} tasks {extra}")


def main(argv: list[str]) -> None:
    what = argv[0]
    if what == "foreign":
        foreign(int(argv[1]), Path(argv[2]))
    elif what == "own":
        own(Path(argv[1]), Path(argv[2]), float(argv[3]))
    else:
        flags = dict(zip(argv[3::2], argv[4::2], strict=False))
        timed(argv[1], argv[2], int(flags["--sample"]) if "--sample" in flags else None, flags.get("--store"))


if __name__ == "__main__":
    main(sys.argv[1:])
