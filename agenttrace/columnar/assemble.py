"""Rows back into the report's own records: TaskFigures, StepFigures and GenerationFigures built
from the per-task, per-step and per-generation rows (`rows.py`), then folded by the report's
`ReportFold` (run figures, labels, what-if), so the run-level definitions stay in one place. A
generation's figures and what its rounds tell the what-if are the queries' columns
(generations_sql.py); its text figures come from `report/spec.py`'s text_figures, and a generation
the columns do not state from spec.py whole. Python runs per
generation, never per span or round, except for the tasks coverage.per_span_tasks names:
per_span_figures gives them the per-span code's figures. A task's sub-agents' runs and compactions
give their part (stages, counts, the cache's cost) from runs_sql.task_runs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from agenttrace import semconv as sc
from agenttrace.core.costmodel import RoundStats
from agenttrace.core.roofline import RooflinePhase
from agenttrace.report.built import built
from agenttrace.report.figures import TaskAnalysis, not_inferred
from agenttrace.report.model import STAGE_FIELDS, GenerationFigures, StageTimes, StepFigures, TaskFigures, lean
from agenttrace.report.segments import Breakdown, sum_segments
from agenttrace.report.spec import (
    ESTIMATOR_RATIO,
    AcceptanceStats,
    acceptance_stats,
    aggregate,
    generation_figures,
    peaks_device,
    text_figures,
)
from agenttrace.report.stages import stage_times
from agenttrace.traces.span_records import SpanRecord

NS = 1e9


def typed(value: str) -> Any:
    """A typed attribute text (load.py) back to the value the per-span path holds."""
    kind, rest = value[:1], value[1:]
    if kind == "s":
        return rest
    if kind == "i":
        return int(rest)
    if kind == "d":
        return float(rest)
    if kind == "b":
        return rest == "1"
    return _array(rest)


def _array(text: str) -> list:
    """An array attribute's kept text (load.ARRAYS): OTLP/JSON's {"values": [...]} from a file, a
    JSON array from the exporter's table; [] for one whose text is not kept or cannot be read (as
    the figures then leave it out)."""
    from agenttrace.errors import JSONError
    from agenttrace.traces.jsontext import parse_json
    from agenttrace.traces.otlp_json import decode_any_value

    if not text:
        return []
    try:
        doc = parse_json(text)
        value = decode_any_value({"arrayValue": doc}) if isinstance(doc, dict) else doc
    except (JSONError, ValueError, TypeError, AttributeError):
        return []
    return value if isinstance(value, list) else []


def _totals(gens: dict[str, list], g: int) -> AcceptanceStats:
    """spec.totals of generation row g, from its columns."""
    return AcceptanceStats(draft_tokens=gens["drafted"][g], rounds=gens["rounds"][g], draft_s=gens["draft_s"][g],
                           verify_s=gens["verify_s"][g])


def _ratio(gens: dict[str, list], g: int) -> AcceptanceStats:
    """What a generation with neither rounds nor a round count tells the what-if: its totals, the
    rejections as drafted less accepted (spec.acceptance_stats without rounds)."""
    stats = _totals(gens, g)
    stats.accepted = gens["accepted"][g]
    stats.rejections = max(0, stats.draft_tokens - stats.accepted)
    stats.estimator = ESTIMATOR_RATIO
    return stats


def _acceptance(gens: dict[str, list], g: int) -> AcceptanceStats:
    """What generation row g, which has rounds, tells the what-if: from its round columns
    (generations_sql.round_columns) over its totals."""
    no_draft = gens["c_no_draft"][g]
    cost = RoundStats(
        accepted=float(gens["c_accepted"][g]), rejections=float(gens["c_rejections"][g]),
        drafted=float(gens["c_drafted"][g]), draft_s=gens["c_draft_s"][g], rounds=float(gens["c_rounds"][g]),
        no_draft=float(no_draft), offered=gens["c_offered"][g], proposed=gens["c_proposed"][g],
        judged=gens["c_judged"][g], passed=gens["c_passed"][g],
        widths={n: [w, t] for n, w, t in zip(gens["c_widths"][g], gens["c_width_n"][g], gens["c_width_s"][g], strict=True)},
        asked=dict(zip(gens["c_asked_k"][g], gens["c_asked_n"][g], strict=True)))
    if no_draft:  # the plain steps, each a round that drafted nothing at the common k (spec._round_stats)
        k = gens["c_common_k"][g]
        cost.asked[k] = cost.asked.get(k, 0.0) + no_draft
        if not cost.offered:
            cost.offered.append(0.0)
        cost.offered[0] += no_draft
    stats = _totals(gens, g)
    stats.accepted, stats.rejections = gens["r_accepted"][g], gens["r_rejections"][g]
    stats.draft_tokens = stats.draft_tokens or gens["r_drafted"][g]
    stats.rounds = stats.rounds or gens["r_n"][g]
    stats.cost = cost
    return stats


def _tuple(value) -> tuple:
    """A tuple as Arrow hands it back (a dict by position)."""
    return tuple(value.values()) if isinstance(value, dict) else tuple(value)


def _generation(gens: dict[str, list], g: int, step: int, task_start: int) -> GenerationFigures:
    """spec.generation_figures of generation row g, from its values; its text figures from its
    attributes, by spec.text_figures itself."""
    a = {k: typed(v) for k, v in gens["attrs"][g]}
    t = text_figures(a)
    flop_s = gens["peak_flop_s"][g]
    return built(  # the fields in their declared order (built keeps the dict as it is then)
        GenerationFigures, step=step, attempt=gens["attempt"][g], start_s=(gens["start_ns"][g] - task_start) / NS,
        wall_s=gens["wall_s"][g], model=t["model"], method=t["method"], num_speculative_tokens=gens["k"][g],
        input_tokens=gens["in_tokens"][g], output_tokens=gens["out"][g], prefill_s=gens["prefill_s"][g],
        draft_s=gens["draft_s"][g], verify_s=gens["verify_s"][g], rounds=gens["rounds"][g], draft_tokens=gens["drafted"][g],
        accepted_tokens=gens["accepted"][g], acceptance_rate=gens["acceptance_rate"][g],
        mean_acceptance_length=gens["mean_acceptance_length"][g], tokens_per_s=gens["tokens_per_s"][g],
        decode_s_per_token=gens["decode_per_token"][g], fallback=gens["fallback"][g], fallback_reason=t["fallback_reason"],
        constrain_engine=t["constrain_engine"], constrain_s=gens["constrain_s"][g], drafts_cut=gens["drafts_cut"][g],
        constrain_fallback=t["constrain_fallback"], batch_size=gens["batch"][g], spec_policy=t["spec_policy"],
        roofline=[RooflinePhase(*_tuple(x)) for x in gens["rf"][g]],
        roofline_peaks=None if flop_s is None else (flop_s, gens["peak_bytes_s"][g], peaks_device(a)))


def _spec_code(gens: dict[str, list], g: int, tree: _Kids, step: int, task_start: int) -> tuple[GenerationFigures, AcceptanceStats]:
    """A generation the values do not state (generations_sql's `whole`), by spec.py itself, given
    the attributes it reads and its prefill children's time."""
    gen = _span(gens["start_ns"][g], gens["end_ns"][g], {k: typed(v) for k, v in gens["attrs"][g]})
    tree.kids_of = {id(gen): [_span(0, gens["prefill_ns"][g], _PREFILL)] if gens["has_prefills"][g] else []}
    figs = generation_figures(tree, gen, step, gens["attempt"][g], task_start)
    return figs, _acceptance(gens, g) if gens["r_n"][g] else acceptance_stats(tree, gen, [])


def _span(start_ns: int, end_ns: int, attributes: dict) -> SpanRecord:
    """What spec.py reads of a span (a generation, or one of its prefill children)."""
    return SpanRecord("", "", None, "", "INTERNAL", start_ns, end_ns, attributes)


class _Kids:
    """The span tree as spec.py asks it: a generation's children (its prefill spans)."""

    def __init__(self) -> None:
        self.kids_of: dict[int, list[SpanRecord]] = {}

    def kids(self, span: SpanRecord) -> list[SpanRecord]:
        return self.kids_of.get(id(span), [])


def pivot(segs: dict[str, list]) -> dict[tuple[int, int], Breakdown]:
    """(kind, owner) -> its Breakdown (on-path ns and overlap ns by segment), from rows.segment_times."""
    return {(kind, owner): Breakdown(on, off) for kind, owner, on, off in
            zip(segs["kind"], segs["owner"], segs["on_ns"], segs["off_ns"], strict=True)}


_NONE = Breakdown()
_PREFILL = {sc.SEGMENT: sc.Segment.PREFILL.value}


@dataclass(slots=True)
class Runs:
    """What a task's sub-agents' runs and compactions give its figures (runs_sql.task_runs)."""

    stages: StageTimes
    sub_agents: int
    compactions: int
    reprefill_tokens: int | None
    reprefill_s: float | None


def task_runs(table: dict[str, list]) -> dict[int, Runs]:
    """runs_sql.task_runs' rows by task; the stages as stage_times gives them (zeros left out)."""
    return {task: Runs(lean(StageTimes(**{f: v for f, v in zip(STAGE_FIELDS, stages, strict=True) if v})), *rest)
            for task, stages, *rest in zip(table["task"], table["stages"], table["sub_agents"], table["compactions"],
                                           table["reprefill_tokens"], table["reprefill_s"], strict=True)}


def analyses(tasks: dict[str, list], steps: dict[str, list], attempts: dict[str, list], gens: dict[str, list],
             segs: dict[tuple[int, int], Breakdown], given: dict[int, TaskAnalysis],
             runs: dict[int, Runs]) -> list[TaskAnalysis]:
    """The TaskAnalysis of every task, in the rows' order (start, then input order); a task in
    `given` (per_span_figures) is taken from there, one in `runs` takes its stages, sub-agents and
    compactions from there."""
    valid: defaultdict[int, int] = defaultdict(int)
    count: defaultdict[int, int] = defaultdict(int)
    for task, ok in zip(attempts["task"], attempts["valid"], strict=True):
        count[task] += 1
        valid[task] += bool(ok)
    steps_of: defaultdict[int, list[int]] = defaultdict(list)
    for row, task in enumerate(steps["task"]):
        steps_of[task].append(row)
    gens_of: defaultdict[int, list[int]] = defaultdict(list)
    for row, step in enumerate(gens["step"]):
        gens_of[step].append(row)
    tree = _Kids()
    out = []
    for row, task in enumerate(tasks["task"]):
        if task in given:
            out.append(given[task])
            continue
        start, end = tasks["start_ns"][row], tasks["end_ns"][row]
        acceptance: list = []
        step_figs: list[StepFigures] = []
        moments: list[int] = []  # each step's first decision
        n_valid = 0
        correct: list[int] = []
        marks = False
        for r in steps_of.get(task, ()):
            step = steps["step"][r]
            s_start, s_end = steps["start_ns"][r], steps["end_ns"][r]
            index = steps["idx"][r]
            generations = []
            for g in gens_of.get(step, ()):
                if gens["whole"][g]:
                    figs, stats = _spec_code(gens, g, tree, index, start)
                else:
                    figs = _generation(gens, g, index, start)
                    stats = _acceptance(gens, g) if gens["r_n"][g] else _ratio(gens, g)
                generations.append(figs)
                acceptance.append((figs.method, stats))
            generations.sort(key=lambda f: f.start_s)  # the rows come in the walk's order (figures._scan_step)
            b = segs.get((1, step), _NONE)
            retry = segs.get((2, step), _NONE)
            first, first_correct = steps["first"][r], steps["first_correct"][r]
            if first is not None:
                moments.append(first)
            n_valid += steps["moments"][r]
            if first_correct is not None:
                correct.append(first_correct)
            marks = marks or bool(steps["marks"][r])
            step_figs.append(built(StepFigures,
                index=index, outcome=steps["outcome"][r], attempts=steps["attempts"][r],
                start_s=(s_start - start) / NS, wall_s=max(0, s_end - s_start) / NS,
                ttvtc_s=(first - s_start) / NS if first is not None else None,
                segments=b.segments(), retry_s=retry.total_ns() / NS, retry_segments=retry.segments(),
                overlap_s=sum(b.overlap_ns) / NS, overlap_segments=b.overlap_segments(),
                time_to_correct_action_s=(first_correct - s_start) / NS if first_correct is not None else None,
                generations=generations, inferred=bool(steps["inferred"][r]),
            ))
        b = segs.get((0, task), _NONE)
        # a task without sub-agents or compactions: the stages of its own breakdown, keyed by the
        # object stage_times is given as the root
        run = runs.get(task) or Runs(stage_times({id(b): b}, b, []), 0, 0, None, None)  # type: ignore[arg-type]
        wall = (end - start) / NS
        outcome = tasks["outcome"][row]
        segments = b.segments()
        figures = built(TaskFigures,
            trace_id=tasks["trace_id"][row], task_id=tasks["task_id"][row], agent=tasks["agent"][row],
            run_label=tasks["run_label"][row] or None, run_id=tasks["run_id"][row] or None, outcome=outcome,
            wall_s=wall,
            ttvtc_s=(min(moments) - start) / NS if moments else None,
            time_to_correct_action_s=(min(correct) - start) / NS if correct else None,
            decisions_valid=n_valid, decisions_invalid=tasks["decisions_invalid"][row],
            decision_throughput=n_valid / wall if wall > 0 else 0.0,
            attempts=count[task], valid_attempts=valid[task], segments=segments,
            retry_s=sum(f.retry_s for f in step_figs), retry_segments=sum_segments(f.retry_segments for f in step_figs),
            speculation=aggregate(g for f in step_figs for g in f.generations), steps=step_figs,
            overlap_s=sum(b.overlap_ns) / NS, overlap_segments=b.overlap_segments(), partial=False,
            expects_correct_action=marks, critical_path=[], waterfall=None, inferred=[], absent=[],
            not_inferred=not_inferred(None, steps=len(step_figs), attempts=count[task], has_ttvtc=bool(moments),
                                      outcome_known=outcome != "unknown", partial=False),
            stages=run.stages, sub_agents=run.sub_agents, compactions=run.compactions,
            reprefill_tokens=run.reprefill_tokens, reprefill_s=run.reprefill_s,
        )
        out.append(TaskAnalysis(figures, acceptance))
    return out


_KINDS = {"PRODUCER": "PRODUCER", "CONSUMER": "CONSUMER", "SERVER": "SERVER"}  # the only kinds the figures test


def add_critical_paths(by_task: dict[int, TaskFigures], spans: dict[str, list]) -> None:
    """The critical path's sections of the tasks whose spans came back (rows.path_spans), from
    span_tree.critical_path itself: a task's spans as records, its tree, Jaeger's walk."""
    from agenttrace.report.model import PathSectionFigures
    from agenttrace.report.span_tree import SpanTree, critical_path
    from agenttrace.traces.span_records import SpanRecord

    members: defaultdict[int, list[SpanRecord]] = defaultdict(list)
    for task, i, pi, trace, name, kind, start, end, segment in zip(
            spans["task"], spans["i"], spans["pi"], spans["trace_id"], spans["name"], spans["kind"], spans["start_ns"],
            spans["end_ns"], spans["segment"], strict=True):
        attrs = {sc.SEGMENT: segment} if segment else {}
        members[task].append(SpanRecord(trace, str(i), str(pi) if pi is not None else None, name,
                                        _KINDS.get(kind, "INTERNAL"), start, end, attrs))
    for task, records in members.items():
        figures = by_task.get(task)
        if figures is None:  # made by the per-span code, critical path and all
            continue
        tree = SpanTree(records)
        root = tree.by_id[(records[0].trace_id, str(task))]
        start = root.start_ns
        figures.critical_path = [
            PathSectionFigures(name=sec.span.name, segment=sec.span.segment or "other",
                               start_s=(sec.start_ns - start) / NS, end_s=(sec.end_ns - start) / NS)
            for sec in critical_path(tree, root)]


_ROUND_KEYS = (sc.ROUND_DRAFTED, sc.ROUND_ACCEPTED, sc.ROUND_DRAFT_S, sc.ROUND_VERIFY_S, sc.ROUND_K, sc.ROUND_TREE_DEPTH)


def per_span_figures(spans: dict[str, list]) -> tuple[dict[int, TaskAnalysis], list[str]]:
    """The figures of the tasks whose spans came back (rows.task_spans), by the per-span code
    itself (normalise, SpanTree, figures.task_figures), one task at a time; and the problems that
    code words about them (the caller hands an input with any to the per-span path: their lines
    name each span's source line, which the table does not keep)."""
    from agenttrace.report.figures import task_figures
    from agenttrace.report.span_tree import SpanTree
    from agenttrace.traces import normalise
    from agenttrace.traces.span_records import EventRecord

    members: defaultdict[int, list[SpanRecord]] = defaultdict(list)
    roots: dict[int, tuple[str, str]] = {}
    for task, i, trace, span, parent, name, kind, status, start, end, attrs, rounds, label, run in zip(
            spans["task"], spans["i"], spans["trace_id"], spans["span_id"], spans["parent_id"], spans["name"],
            spans["kind"], spans["status"], spans["start_ns"], spans["end_ns"], spans["attrs"], spans["rounds"],
            spans["run_label"], spans["run_id"], strict=True):
        events = [EventRecord(sc.EVENT_SPECULATE_ROUND, 0, dict(zip(_ROUND_KEYS, r.values(), strict=True)))
                  for r in rounds]
        resource = {k: v for k, v in ((sc.RUN_LABEL, label), (sc.RUN_ID, run)) if v}  # what the figures read of it
        members[task].append(SpanRecord(trace, span, parent or None, name, _KINDS.get(kind, "INTERNAL"), start, end,
                                        {k: typed(v) for k, v in attrs}, events, status, resource=resource))
        if i == task:
            roots[task] = (trace, span)
    out, problems = {}, []
    for task, records in members.items():
        normalised = normalise(records)
        tree = SpanTree(normalised.spans)
        problems += normalised.problems + tree.problems
        out[task] = task_figures(tree, tree.by_id[roots[task]])
    return out, problems
