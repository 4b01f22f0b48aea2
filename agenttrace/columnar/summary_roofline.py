"""The roofline of a summary made in the engine: each phase's passes summed per run label and
over all of them, the first peaks recorded, batch sizes and policies, as aggregates over the
generation values (`summary_sql.py`'s `rf`, `peaks`, `batch`, `policy`), put back into the
report's RooflineFold (report/roofline_fold.py), whose `figures()` places them against the peaks.
"""

from __future__ import annotations

from agenttrace.columnar import summary_sql as q
from agenttrace.report.roofline_fold import RooflineFold


def queries(p: str = "x_") -> dict[str, str]:
    g = f"{p}gv"
    phases = f"""SELECT key, label, e.1 AS phase, e.2 AS passes, e.3 AS n_rows, e.4 AS flops, e.5 AS bytes, e.6 AS seconds, pos
FROM {g} ARRAY JOIN rf AS e, arrayEnumerate(rf) AS pos"""
    cols = ("flops", "bytes", "seconds")
    ordered = (q.in_order(f"groupArray(((key, pos), {', '.join(cols)}))", cols) + ", "
               + ", ".join(f"{q.running_sum(f'{c}_o')} AS s_{c}" for c in cols))
    return {
        "phases": f"""SELECT grouping(label) = 1 AS whole, label, phase, min((key, pos)) AS first, sum(passes) AS s_passes,
       sum(n_rows) AS s_rows, {ordered}
FROM ({phases}) GROUP BY GROUPING SETS ((label, phase), (phase)) ORDER BY first""",
        "run": f"""SELECT argMinIf(peaks, key, peaks IS NOT NULL) AS first_peaks, countIf(batch IS NOT NULL) AS batched,
       {q.running_sum("arrayMap(x -> x.2, arraySort(x -> x.1, groupArrayIf((key, assumeNotNull(batch)), batch IS NOT NULL)))")}
           AS batch_sum
FROM {g}""",
        "policies": f"""SELECT policy, count() AS n, min(key) AS first FROM {g} WHERE policy IS NOT NULL
GROUP BY policy ORDER BY first""",
    }


KEEP = {"phases": "whole, label, phase, s_passes, s_rows, s_flops, s_bytes, s_seconds",
        "run": "first_peaks, batched, batch_sum", "policies": "policy, n"}


def roofline_fold(tables: dict[str, list[dict]]) -> RooflineFold:
    """A RooflineFold holding what adding the generations one at a time would have left in it."""
    fold = RooflineFold()
    for r in tables["phases"]:  # in the order each phase first came
        sums = fold.all if r["whole"] else fold.by_label.setdefault(r["label"], {})
        sums[r["phase"]] = [r["s_passes"], r["s_rows"], r["s_flops"], r["s_bytes"], r["s_seconds"]]
        fold.any = True
    run = tables["run"][0]
    peaks = run["first_peaks"]
    if peaks is not None:
        flop_s, bytes_s, device = peaks.values() if isinstance(peaks, dict) else peaks
        fold.peaks = (flop_s, bytes_s, device)
    fold.batched, fold.batch_sum = float(run["batched"]), run["batch_sum"] if run["batched"] else 0.0
    fold.policies = {r["policy"]: r["n"] for r in tables["policies"]}
    return fold
