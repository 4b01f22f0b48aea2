"""The what-if of a summary made in the engine: the pools `report/whatif.py`'s WhatIfFold keeps
(per label and drafter: its generations and their decoding; per model: the plain generations'
decoding; per label and drafter: the rounds' statistics) as aggregates over the generation values
(`summary_sql.py`, `{p}gv`), put back into a WhatIfFold whose `figures()` runs the cost model as
for a report. Floats are added in the fold's order (generations by task, step and start; the
rounds' statistics by task, step and the per-span walk's order, `wkey`: tree.dfs_key); counts
in any order; the dicts' keys come back with the generation that first had them, so they keep
the fold's order too.
"""

from __future__ import annotations

from agenttrace.columnar import summary_sql as q
from agenttrace.core.costmodel import RoundStats
from agenttrace.report.spec import ESTIMATOR_RATIO, ESTIMATOR_ROUNDS, AcceptanceStats
from agenttrace.report.whatif import Decoding, DrafterGenerations, Untimed, WhatIfFold

_SPEC = "method != 'none'"


def _in_order(names: tuple[str, ...], where: str = "", key: str = "key") -> str:
    """Each name's values in the fold's order (rows sorted by `key` once), as `{name}_o`."""
    rows = f"groupArray{'If' if where else ''}(({key}, {', '.join(names)}){', ' + where if where else ''})"
    return q.in_order(rows, names)


def _sums(names: tuple[str, ...]) -> str:
    return ", ".join(f"{q.running_sum(f'{n}_o')} AS s_{n}" for n in names)


_DECODING = ("d", "outside", "xx", "yy", "xy", "xt", "yt")


def _decoding() -> str:
    """Decoding.add's sums over the generations whose decode time is known (`dec`)."""
    return (f"countIf(dec) AS dec_n, sumIf(out, dec) AS dec_tokens, sumIf(out - 1, dec) AS dec_steps, "
            f"{_in_order(_DECODING, 'dec')}, {_sums(_DECODING)}")


def queries(p: str = "x_") -> dict[str, str]:
    g = f"{p}gv"
    return {
        "drafters": f"""SELECT label, method, constrained, min(key) AS first, count() AS generations, sum(rounds) AS g_rounds,
       sum(drafted) AS g_drafted, sum(accepted) AS g_accepted, {_decoding()}
FROM {g} WHERE {_SPEC} GROUP BY label, method, constrained ORDER BY first""",
        "plain": f"""SELECT model, constrained, {_decoding()} FROM {g} WHERE NOT ({_SPEC}) GROUP BY model, constrained""",
        "ks": f"""SELECT label, method, constrained, k, count() AS n, min(key) AS first FROM {g}
WHERE {_SPEC} AND k != 0 GROUP BY label, method, constrained, k ORDER BY first""",
        "models": f"""SELECT label, method, constrained, model, count() AS n, min(key) AS first FROM {g}
WHERE {_SPEC} GROUP BY label, method, constrained, model ORDER BY first""",
        "stats": f"""SELECT label, method, sum(a_accepted) AS accepted, sum(a_rejections) AS rejections,
       sum(a_drafted) AS draft_tokens, sum(a_rounds) AS st_rounds, max(NOT has_rounds) AS ratio,
       sum(if(has_rounds, c_accepted, 0)) AS c_acc, sum(if(has_rounds, c_rejections, 0)) AS c_rej,
       sum(if(has_rounds, c_drafted, 0)) AS c_dr, sum(if(has_rounds, c_rounds, 0)) AS c_rn, sum(a_no_draft) AS c_nd,
       sumForEach(if(has_rounds, a_offered, [])) AS offered, sumForEach(if(has_rounds, c_proposed, [])) AS proposed,
       sumForEach(if(has_rounds, c_judged, [])) AS judged, sumForEach(if(has_rounds, c_passed, [])) AS passed,
       {_in_order(("draft_s", "verify_s", "c_draft"), key="wkey")}, {_sums(("draft_s", "verify_s", "c_draft"))}
FROM (SELECT *, if(has_rounds, c_draft_s, 0) AS c_draft FROM {g} WHERE {_SPEC}) GROUP BY label, method""",
        "widths": f"""SELECT label, method, wn, min((key, pos)) AS first, sum(wc) AS w, {_in_order(("ws",))}, {_sums(("ws",))}
FROM (SELECT wkey AS key, label, method, wn, wc, ws, pos FROM {g} ARRAY JOIN c_widths AS wn, c_width_n AS wc, c_width_s AS ws, arrayEnumerate(c_widths) AS pos
      WHERE {_SPEC} AND has_rounds)
GROUP BY label, method, wn ORDER BY first""",
        "asked": f"""SELECT label, method, ak, min((key, pos)) AS first, sum(an) AS n
FROM (SELECT wkey AS key, label, method, ak, an, pos FROM {g} ARRAY JOIN a_asked_k AS ak, a_asked_n AS an, arrayEnumerate(a_asked_k) AS pos
      WHERE {_SPEC} AND has_rounds)
GROUP BY label, method, ak ORDER BY first""",
    }


KEEP = {  # the columns each query sends back
    "drafters": "label, method, constrained, generations, g_rounds, g_drafted, g_accepted, dec_n, dec_tokens, dec_steps, "
                + ", ".join(f"s_{n}" for n in _DECODING),
    "plain": "model, constrained, dec_n, dec_tokens, dec_steps, " + ", ".join(f"s_{n}" for n in _DECODING),
    "ks": "label, method, constrained, k, n",
    "models": "label, method, constrained, model, n",
    "stats": "label, method, accepted, rejections, draft_tokens, st_rounds, ratio, c_acc, c_rej, c_dr, c_rn, c_nd, "
             "offered, proposed, judged, passed, s_draft_s, s_verify_s, s_c_draft",
    "widths": "label, method, wn, w, s_ws",
    "asked": "label, method, ak, n",
}


def _decoding_of(r: dict) -> Decoding:
    u = Untimed(n=r["dec_n"], sxx=r["s_xx"], syy=r["s_yy"], sxy=r["s_xy"], sxt=r["s_xt"], syt=r["s_yt"])
    return Decoding(decode_s=r["s_d"], outside_s=r["s_outside"], tokens=r["dec_tokens"], steps=r["dec_steps"], untimed=u)


def whatif_fold(tables: dict[str, list[dict]]) -> WhatIfFold:
    """A WhatIfFold holding what adding the generations one at a time would have left in it."""
    fold = WhatIfFold()
    for r in tables["drafters"]:  # in the order each pool's first generation came
        key = (r["label"], r["method"], bool(r["constrained"]))
        fold.gens[key] = DrafterGenerations(generations=r["generations"], rounds=r["g_rounds"],
                                            draft_tokens=r["g_drafted"], accepted_tokens=r["g_accepted"],
                                            decoding=_decoding_of(r))
    for r in tables["ks"]:  # Counters filled in first-seen order: most_common breaks ties by it
        fold.gens[(r["label"], r["method"], bool(r["constrained"]))].ks[r["k"]] = r["n"]
    for r in tables["models"]:
        fold.gens[(r["label"], r["method"], bool(r["constrained"]))].models[r["model"]] = r["n"]
    for r in tables["plain"]:
        fold.plain[(r["model"], bool(r["constrained"]))] = _decoding_of(r)
    for r in tables["stats"]:
        cost = RoundStats(accepted=float(r["c_acc"]), rejections=float(r["c_rej"]), drafted=float(r["c_dr"]),
                          draft_s=r["s_c_draft"], rounds=float(r["c_rn"]), no_draft=float(r["c_nd"]),
                          offered=list(r["offered"]), proposed=list(r["proposed"]), judged=list(r["judged"]),
                          passed=list(r["passed"]))
        fold.stats[(r["label"], r["method"])] = AcceptanceStats(
            accepted=r["accepted"], rejections=r["rejections"], draft_tokens=r["draft_tokens"], rounds=r["st_rounds"],
            draft_s=r["s_draft_s"], verify_s=r["s_verify_s"], estimator=ESTIMATOR_RATIO if r["ratio"] else ESTIMATOR_ROUNDS,
            cost=cost)
    for r in tables["widths"]:
        fold.stats[(r["label"], r["method"])].cost.widths[r["wn"]] = [float(r["w"]), r["s_ws"]]
    for r in tables["asked"]:
        fold.stats[(r["label"], r["method"])].cost.asked[r["ak"]] = float(r["n"])
    return fold
