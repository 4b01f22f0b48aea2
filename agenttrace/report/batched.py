"""One report from spans that arrive in batches of whole traces: a folder streamed file by file,
a trace store read page by page, Jaeger's query API window by window.

Every figure of a task comes from its own trace, so each batch is normalised, put in a span tree
and analysed on its own (`figures.py`, exactly as `build.py` does for one batch); what crosses
batches is put together as one pass over everything would have: the tasks in the order of their
agent span's start (ties: the order the spans arrived in, `seq`), the tasks rebuilt from orphaned
steps after them, each input's reading (conventions, spans per segment, what was left out) summed.
A batch's spans can be dropped once it is added: only its figures stay.

Not across batches: a trace split between two batches is two partial traces (the readers batch
by whole traces), and the span tree's problems are listed per batch (at most 10 of a kind each).

A summary (`summary=N`) keeps no task: each batch's tasks are folded into the run figures as they
come (runs.ReportFold, in arrival order), every distribution from a uniform sample of at most N
values (counts, means, extremes and totals exact), so memory stays bounded however large the
input: the report lists no task rows, and at most MAX_PROBLEMS problems.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agenttrace.report.figures import TaskAnalysis, agent_roots, orphan_steps, partial_task, task_figures
from agenttrace.report.inputs import input_figures
from agenttrace.report.model import Report
from agenttrace.report.runs import ReportFold, assemble_report
from agenttrace.report.span_tree import SpanTree
from agenttrace.traces import Reading, normalise
from agenttrace.traces.normalise import MAX_NAMES
from agenttrace.traces.span_records import SpanRecord

__all__ = ["ReportBuilder"]

MAX_PROBLEMS = 200  # a summary's problem lines (then a count of the rest)
SUMMARY_NOTE = ("summary of {tasks} task(s): task rows left out; percentiles from a uniform sample of at most "
                "{n} values each (counts, means, extremes and totals over all of them)")
PARTIAL_NOTE = ("{n} task(s) have no agent span (a truncated file?): built from their step spans, marked partial "
                 "and left out of task-level rates and distributions")


@dataclass
class _Ordered:
    key: tuple[int, int]  # (start ns, arrival) for a task; (arrival, 0) for a partial one
    analysis: TaskAnalysis


@dataclass
class ReportBuilder:
    """Collects the figures of batches of whole traces (`add`), then gives one `Report`."""

    waterfalls: int = 0  # tasks that keep their spans for a chart: the first ones of the first batch
    summary: int | None = None  # fold tasks as they come into a summary with samples of this size
    _tasks: list[_Ordered] = field(default_factory=list)
    _partial: list[_Ordered] = field(default_factory=list)
    _readings: dict[str, Reading] = field(default_factory=dict)
    _problems: list[str] = field(default_factory=list)
    _more_problems: int = 0
    _fold: ReportFold | None = None
    _partials: int = 0
    spans: int = 0

    def add(self, spans: list[SpanRecord], seq: dict[int, int] | None = None) -> None:
        """Analyse one batch of whole traces. `seq`: each span's place in the input (by `id`),
        for ties in the task order; without it, this batch's order (batches added in input
        order)."""
        base = self.spans
        self.spans += len(spans)
        order = seq if seq is not None else {id(s): base + i for i, s in enumerate(spans)}
        normalised = normalise(spans)
        tree = SpanTree(normalised.spans)
        self._note(normalised.problems + tree.problems)
        tasks, partial = ([], []) if self.summary else (self._tasks, self._partial)
        for i, root in enumerate(agent_roots(tree)):
            keep = self.waterfalls > 0 and not self._tasks and i < self.waterfalls
            tasks.append(_Ordered((root.start_ns, order.get(id(root), base)), task_figures(tree, root, waterfall=keep)))
        for steps in orphan_steps(tree):
            first = min(order.get(id(st), base) for st in steps)
            partial.append(_Ordered((first, 0), partial_task(tree, steps)))
        for r in normalised.readings:
            self._merge(r)
        if self.summary:
            if self._fold is None:
                self._fold = ReportFold(self.summary, keep_tasks=False)
            for t in sorted(tasks, key=lambda t: t.key) + sorted(partial, key=lambda t: t.key):
                self._fold.add(t.analysis)
            self._partials += len(partial)

    def _note(self, problems: list[str]) -> None:
        room = MAX_PROBLEMS - len(self._problems) if self.summary else len(problems)
        self._problems += problems[: max(room, 0)]
        self._more_problems += max(len(problems) - max(room, 0), 0)

    def _merge(self, r: Reading) -> None:
        mine = self._readings.get(r.source)
        if mine is None:
            self._readings[r.source] = r
            return
        mine.spans += r.spans
        for name, seen in r.conventions.items():
            into = mine.conventions.get(name)
            if into is None:
                mine.conventions[name] = seen
                continue
            into.spans += seen.spans
            into.segments.update(seen.segments)
            into.variants |= seen.variants
        for key, lo in r.left_out.items():
            into = mine.left_out.get(key)
            if into is None:
                mine.left_out[key] = lo
                continue
            into.count += lo.count
            into.names += [n for n in lo.names if n not in into.names][: MAX_NAMES - len(into.names)]
        mine.inferred |= r.inferred

    def report(self, sources: list[str], problems: list[str] = ()) -> Report:
        """The report of everything added; `problems`: the readers' own (unreadable lines...),
        listed first, as one pass lists them."""
        if self.summary:
            fold = self._fold or ReportFold(self.summary, keep_tasks=False)
            notes = list(self._problems)
            if self._more_problems:
                notes.append(f"{self._more_problems} more problem line(s) left out of this summary")
            if self._partials:
                notes.append(PARTIAL_NOTE.format(n=self._partials))
            notes.append(SUMMARY_NOTE.format(tasks=fold.run.whole + fold.run.partial, n=self.summary))
            report = fold.report(sources, [*problems, *notes])
            report.inputs = [input_figures(r) for r in self._readings.values()]
            return report
        tasks = [t.analysis for t in sorted(self._tasks, key=lambda t: t.key)]
        partial = [t.analysis for t in sorted(self._partial, key=lambda t: t.key)]
        notes = list(self._problems)
        if partial:
            notes.append(PARTIAL_NOTE.format(n=len(partial)))
        report = assemble_report(tasks + partial, sources, [*problems, *notes])
        report.inputs = [input_figures(r) for r in self._readings.values()]
        return report

