"""A generation's values, stated once for both readers of them: the full report's generation rows
(`rows.generation_rows`, made into GenerationFigures by assemble.py) and the summary's value table
(`summary_sql`'s `{p}gv`, folded into run aggregates in the engine). They are report/spec.py's
generation_figures and acceptance_stats as columns: tokens, times, the rates they give, the
roofline's phases, and what the rounds tell the what-if.

Python's arithmetic is kept bit for bit: a rate divides the same two doubles, a sum of floats adds
them in round order (`arrayFold`), an integer read through a float truncates as int(float(x)).
What is text in the figures (model, method, reasons, engines, policy, device) is not made here:
the rows bring those attributes back as they are and spec.text_figures reads them, as the
per-span code does, whatever their type.

`whole`: a generation these columns do not state (roofline arrays holding values of another kind,
a fallback written as an array, a round count with no round events: the what-if's totals path);
its row carries every attribute spec.py reads, and assemble.py gives it to spec.py itself.
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.columnar.tree import integer, narrow, num, text
from agenttrace.report.spec import GENERATION_KEYS

# The attributes the figures read as text (spec.text_figures, and the peaks' device).
TEXT_KEYS = (sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL, sc.SPEC_METHOD, sc.SPEC_FALLBACK_REASON,
             sc.CONSTRAIN_ENGINE, sc.CONSTRAIN_FALLBACK, sc.SPEC_POLICY, sc.ROOFLINE_DEVICE)
_ROOF_KEYS = (sc.ROOFLINE_PHASE, sc.ROOFLINE_PASSES, sc.ROOFLINE_ROWS, sc.ROOFLINE_FLOPS, sc.ROOFLINE_BYTES,
              sc.ROOFLINE_SECONDS)
# Columns only the other columns are made of (per round, per roofline phase): `STEPS` leaves them out.
STEPS = ("prefill0", "dr", "chain", "asked", "kk", "acc", "asked_ks", "asked_n", "rf_p", "rf_n", "rf_r", "rf_f", "rf_b",
         "rf_t")


def truthy(key: str, m: str = "attrs") -> str:
    """Python's bool() of the attribute's value (absent: False); an array's is not said here
    (`whole`)."""
    v, rest = f"{m}['{key}']", f"substring({m}['{key}'], 2)"
    return (f"multiIf({v} = '', false, startsWith({v}, 's'), {rest} != '', startsWith({v}, 'b'), {rest} = '1', "
            f"toFloat64OrZero({rest}) != 0)")


def prefills(p: str = "x_") -> str:
    """Per generation (`pi`) with prefill children: their nanoseconds summed, and that it has
    some (`any`: spec.py then knows the prefill, even of zero length)."""
    return (f"SELECT pi, arraySum(groupArray(greatest(0, end_ns - start_ns))) AS ns, true AS any FROM {p}s "
            f"WHERE segment = '{sc.Segment.PREFILL}' AND pi IS NOT NULL GROUP BY pi")


def generations(p: str = "x_") -> str:
    """The generation spans as the values read them (`s`): their attributes spec.py reads, and
    their rounds, from round events or else from draft and verify children (tree.py's `{p}kr`)."""
    return (f"(SELECT g.i AS i, g.segment AS segment, g.start_ns AS start_ns, g.end_ns AS end_ns, "
            f"if(empty(g.rounds), kr.rounds, g.rounds) AS rounds, g.attrs AS attrs "
            f"FROM {narrow(GENERATION_KEYS, (sc.Segment.GENERATION.value,), 'segment, start_ns, end_ns, rounds')} AS g "
            f"LEFT JOIN {p}kr AS kr ON kr.pi = g.i SETTINGS join_use_nulls = 0)")


def _elements(key: str, m: str) -> str:
    """An array attribute's elements as raw JSON: OTLP/JSON's AnyValue objects from a file, plain
    values from the exporter's table; [] when absent or not an array."""
    t = f"substring({m}['{key}'], 2)"
    return (f"if(startsWith({m}['{key}'], 'a'), if(startsWith({t}, '{{'), JSONExtractArrayRaw({t}, 'values'), "
            f"JSONExtractArrayRaw({t})), CAST([], 'Array(String)'))")


def _element(e: str, kind: str) -> str:
    """One element as `kind` (s text, i integer, f float: an integer or a double), NULL when it
    is another kind (`whole`)."""
    raw_int = f"trim(BOTH '\"' FROM JSONExtractRaw({e}, 'intValue'))"
    if kind == "s":
        return f"if(startsWith({e}, '{{'), if(JSONHas({e}, 'stringValue'), JSONExtractString({e}, 'stringValue'), NULL), " \
               f"if(JSONType({e}) = 'String', JSONExtractString({e}), NULL))"
    if kind == "i":
        return f"if(startsWith({e}, '{{'), if(JSONHas({e}, 'intValue'), toInt64OrNull({raw_int}), NULL), toInt64OrNull({e}))"
    return (f"if(startsWith({e}, '{{'), multiIf(JSONHas({e}, 'intValue'), toFloat64(toInt64OrNull({raw_int})), "
            f"JSONHas({e}, 'doubleValue'), JSONExtract({e}, 'doubleValue', 'Nullable(Float64)'), NULL), "
            f"if(JSONType({e}) IN ('Int64', 'UInt64', 'Double'), JSONExtract({e}, 'Nullable(Float64)'), NULL))")


def _roofline(m: str) -> str:
    """spec.py's _roofline and _peaks, batch size and policy: `rf` the phases (empty where the
    six arrays are not all there at one length), `rf_odd` whether an element is of a kind read
    otherwise, `peak_flop_s` and `peak_bytes_s` (NULL where the peaks are not both numbers with
    bytes above zero), `batch`."""
    cols = [f"arrayMap(e -> {_element('e', k)}, {_elements(key, m)})" for key, k in zip(_ROOF_KEYS, "siifff", strict=True)]
    names = ("rf_p", "rf_n", "rf_r", "rf_f", "rf_b", "rf_t")
    made = ", ".join(f"{c} AS {n}" for c, n in zip(cols, names, strict=True))
    whole = " AND ".join(f"startsWith({m}['{k}'], 'a')" for k in _ROOF_KEYS)
    same = " AND ".join(f"length({n}) = length(rf_p)" for n in names[1:])
    peak_f, peak_b = (f"{m}['{k}']" for k in (sc.ROOFLINE_PEAK_FLOP_S, sc.ROOFLINE_PEAK_BYTES_S))
    numeric = lambda v: f"substring({v}, 1, 1) IN ('i', 'd', 'b')"
    peaks = f"{numeric(peak_f)} AND {numeric(peak_b)} AND {num(sc.ROOFLINE_PEAK_BYTES_S, m)} > 0"
    return f"""{made}, {whole} AND {same} AS rf_ok,
       rf_ok AND ({" OR ".join(f"arrayExists(x -> x IS NULL, {n})" for n in names)}) AS rf_odd,
       if(rf_ok AND NOT rf_odd, arrayMap((p, n, r, f, b, t) -> (assumeNotNull(p), assumeNotNull(n), assumeNotNull(r),
           assumeNotNull(f), assumeNotNull(b), assumeNotNull(t)), rf_p, rf_n, rf_r, rf_f, rf_b, rf_t), []) AS rf,
       if({peaks}, {num(sc.ROOFLINE_PEAK_FLOP_S, m)}, NULL) AS peak_flop_s,
       if({peaks}, {num(sc.ROOFLINE_PEAK_BYTES_S, m)}, NULL) AS peak_bytes_s,
       if({numeric(f"{m}['{sc.BATCH_SIZE}']")}, {num(sc.BATCH_SIZE, m)}, NULL) AS batch"""


def _positions(ups: str) -> str:
    """RoundStats._bump's lists: position i counts the rounds whose `ups` exceed i."""
    return f"arrayMap(i -> toFloat64(arrayCount(u -> u > i, {ups})), range(toUInt64(greatest(0, arrayMax({ups})))))"


def round_columns(m: str = "s.attrs") -> str:
    """What a generation's rounds (`s.rounds`) tell the what-if (spec.py's acceptance_stats and
    _round_stats): sums over all rounds, then the cost model's view of the rounds that drafted
    (chain: a tree's depth, else its draft; the k asked: the round's, else the generation's).
    Float sums are folds in round order, as Python adds them; lists and maps keep
    first-appearance order (the what-if's line fit adds widths in that order)."""
    k = integer(sc.SPEC_NUM_SPECULATIVE_TOKENS, m)
    return f"""arrayFilter(r -> r.1 > 0, s.rounds) AS dr, arrayMap(r -> if(r.6 != 0, r.6, r.1), dr) AS chain,
       arrayMap(r -> if(r.5 != 0, r.5, {k}), dr) AS asked, arrayMap((a, c) -> greatest(a, c), asked, chain) AS kk,
       arrayMap(r -> r.2, dr) AS acc, arrayDistinct(asked) AS asked_ks,
       arrayMap(x -> arrayCount(y -> y = x, asked), asked_ks) AS asked_n,
       length(s.rounds) AS r_n, arraySum(r -> r.2, s.rounds) AS r_accepted, arraySum(r -> r.1, s.rounds) AS r_drafted,
       arrayCount(r -> r.1 > 0 AND r.2 < if(r.6 != 0, r.6, r.1), s.rounds) AS r_rejections,
       length(dr) AS c_rounds, arraySum(chain) AS c_drafted, arraySum(acc) AS c_accepted,
       arrayFold((x, r) -> x + r.3, dr, toFloat64(0)) AS c_draft_s, arrayCount((a, c) -> a < c, acc, chain) AS c_rejections,
       greatest(0, {integer(sc.GEN_AI_USAGE_OUTPUT_TOKENS, m)} - (1 + c_rounds + c_accepted)) AS c_no_draft,
       if(empty(asked_ks), greatest({k}, 1), asked_ks[indexOf(asked_n, arrayMax(asked_n))]) AS c_common_k,
       arrayDistinct(kk) AS c_asked_k, arrayMap(x -> toFloat64(arrayCount(y -> y = x, kk)), c_asked_k) AS c_asked_n,
       {_positions("arrayMap((a, c) -> least(a, c + 1), kk, chain)")} AS c_offered, {_positions("chain")} AS c_proposed,
       {_positions("arrayMap((c, a) -> least(c, a + 1), chain, acc)")} AS c_judged, {_positions("acc")} AS c_passed,
       arrayDistinct(arrayMap(c -> c + 1, chain)) AS c_widths,
       arrayMap(n -> toFloat64(arrayCount(c -> c + 1 = n, chain)), c_widths) AS c_width_n,
       arrayMap(n -> arrayFold((x, c, r) -> if(c + 1 = n, x + r.4, x), chain, dr, toFloat64(0)), c_widths) AS c_width_s"""


def values(m: str = "s.attrs") -> str:
    """The select list of a generation's values, over `s` (the generation: start_ns, end_ns,
    rounds and the attributes `m`) and `prefills` (left-joined by the generation: `prefills`)."""
    return f"""greatest(0, s.end_ns - s.start_ns) / 1e9 AS wall_s, {num(sc.SPEC_PREFILL_S, m)} AS prefill0,
       if(prefill0 != 0, prefill0, ifNull(prefills.ns, 0) / 1e9) AS prefill_s,
       mapContains({m}, '{sc.SPEC_PREFILL_S}') OR ifNull(prefills.any, false) AS knows_prefill,
       {integer(sc.GEN_AI_USAGE_OUTPUT_TOKENS, m)} AS out, {integer(sc.GEN_AI_USAGE_INPUT_TOKENS, m)} AS in_tokens,
       {integer(sc.SPEC_ROUNDS, m)} AS rounds, {integer(sc.SPEC_DRAFT_TOKENS, m)} AS drafted,
       {integer(sc.SPEC_ACCEPTED_TOKENS, m)} AS accepted, {integer(sc.SPEC_NUM_SPECULATIVE_TOKENS, m)} AS k,
       if({truthy(sc.SPEC_METHOD, m)}, {text(sc.SPEC_METHOD, m)}, 'none') AS method,
       {truthy(sc.SPEC_FALLBACK, m)} AS fallback,
       mapContains({m}, '{sc.CONSTRAIN_ENGINE}') AS constrained,
       constrained AND mapContains({m}, '{sc.CONSTRAIN_FALLBACK}') AS constrain_fallback,
       {integer(sc.CONSTRAIN_DRAFTS_CUT, m)} AS drafts_cut,
       {num(sc.SPEC_DRAFT_S, m)} AS draft_s, {num(sc.SPEC_VERIFY_S, m)} AS verify_s,
       {num(sc.CONSTRAIN_MASK_S, m)} + {num(sc.CONSTRAIN_COMPILE_S, m)} AS constrain_s,
       if(wall_s > 0, out / wall_s, NULL) AS tokens_per_s,
       if(out != 0 AND knows_prefill, greatest(toFloat64(0), wall_s - prefill_s) / out, NULL) AS decode_per_token,
       if(drafted != 0, accepted / drafted, NULL) AS acceptance_rate,
       if(rounds != 0, 1 + accepted / rounds, NULL) AS mean_acceptance_length,
       {_roofline(m)},
       {round_columns(m)},
       rf_odd OR startsWith({m}['{sc.SPEC_FALLBACK}'], 'a') OR (r_n = 0 AND rounds != 0) AS whole"""
