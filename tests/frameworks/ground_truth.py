"""A recording's ground truth, from the clocks of the run itself: the fake server's log of model
calls (when each request was read, when its answer's last byte went out, what it decided) and
the agent script's log of tasks and tool bodies (truth.py). No span is read here.

The decision rules are those of our own runtime (agenttrace/runtime/agent.py), so a retry means
the same thing whoever wrote the trace: an attempt is one model reply and the tool bodies that
ran its calls; it failed when it called tools and none of them completed (the framework refused
the arguments, or the body raised); a failed attempt is followed by a retry of the same step;
an attempt that holds is a tool call, or the answer (text, or smolagents' `final_answer` call).
A tool body belongs to the latest model reply before it started; a delegation (a sub-agent's
run) is a call that a sub-agent's model calls follow. A task's attempts count its sub-agent's
too, as the report counts every attempt below a task (our runtime's delegations included). Tool time is the time any tool body of the
task ran (a sub-agent's included, parallel calls counted once), as the report's tool segment
charges every tool execution on the task's critical path wherever it sits.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

DELEGATION_WORDS = ("expert", "delegate", "transfer", "handoff")


def _union_s(intervals: list[tuple[int, int]]) -> float:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1e9


def _is_delegation(name: str) -> bool:
    return any(w in name.lower() for w in DELEGATION_WORDS)


def _attempts(agent: str, reqs: list[dict[str, Any]], bodies: list[dict[str, Any]], owner: dict[int, int],
              end: int) -> list[dict[str, Any]]:
    """One agent's attempts (the main agent's, or the sub-agent's): a model reply each, with the
    tool bodies that ran its calls, failed when it called tools and none completed."""
    mine_reqs = [ri for ri, r in enumerate(reqs) if r["agent"] == agent]
    attempts: list[dict[str, Any]] = []
    for n, ri in enumerate(mine_reqs):
        r = reqs[ri]
        mine = [b for bi, b in enumerate(bodies) if owner.get(bi) == ri]
        calls = [name for name, _ in r["calls"]]
        answer = r["kind"] in ("answer", "final_answer")
        following = reqs[mine_reqs[n + 1]]["received_ns"] if n + 1 < len(mine_reqs) else end
        delegated = any(_is_delegation(c) for c in calls) and any(
            q["agent"] == "expert" and r["done_ns"] <= q["received_ns"] < following for q in reqs)
        ok = answer or delegated or any(b["raised"] is None for b in mine)
        attempts.append({"request": ri, "calls": calls, "answer": answer, "ok": ok,
                         "decided_ns": r["done_ns"], "tools": [b["name"] for b in mine],
                         "raised": [b["raised"] for b in mine if b["raised"]]})
    return attempts


def task_truth(task: dict[str, Any], requests: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The truth of one task (an agent run): its steps and attempts, outcome, TTVTC, tool and
    delegation time, from the requests and tool bodies inside its interval."""
    start, end = task["start_ns"], task["end_ns"]
    reqs = sorted((r for r in requests if start <= r["received_ns"] < end and r["agent"] != "none"),
                  key=lambda r: r["received_ns"])
    bodies = sorted((b for b in tools if start <= b["start_ns"] < end), key=lambda b: b["start_ns"])
    owner: dict[int, int] = {}  # body index -> request index
    for bi, b in enumerate(bodies):
        before = [ri for ri, r in enumerate(reqs) if r["done_ns"] <= b["start_ns"]]
        if before:
            owner[bi] = max(before, key=lambda ri: reqs[ri]["done_ns"])
    attempts = _attempts("main", reqs, bodies, owner, end)
    sub_attempts = _attempts("expert", reqs, bodies, owner, end)
    steps: list[list[dict[str, Any]]] = []
    for a in attempts:
        if steps and not steps[-1][-1]["ok"]:
            steps[-1].append(a)  # a failed attempt is retried
        else:
            steps.append([a])
    step_rows = []
    for s in steps:
        last = s[-1]
        outcome = ("final_answer" if last["answer"] else "tool_call") if last["ok"] else "failed"
        step_rows.append({"outcome": outcome, "attempts": len(s)})
    first_ok = next((a for a in attempts if a["ok"]), None)
    completed = task["error"] is None and bool(attempts) and attempts[-1]["answer"] and attempts[-1]["ok"]
    return {
        "case": task["case"],
        "outcome": "completed" if completed else "failed",
        "error": task["error"],
        "steps": step_rows,
        "attempts": len(attempts) + len(sub_attempts),  # a sub-agent's too, as the report counts a task's attempts
        "retries": len(attempts) - len(steps),
        "ttvtc_s": None if first_ok is None else (first_ok["decided_ns"] - start) / 1e9,
        "tool_s": _union_s([(b["start_ns"], b["end_ns"]) for b in bodies if not b["delegation"]]),
        # time tool bodies ran beside one another (parallel calls): the report's parallel branches
        "parallel_s": sum((b["end_ns"] - b["start_ns"]) / 1e9 for b in bodies if not b["delegation"])
        - _union_s([(b["start_ns"], b["end_ns"]) for b in bodies if not b["delegation"]]),
        "delegation_s": _union_s([(b["start_ns"], b["end_ns"]) for b in bodies if b["delegation"]]),
        "wall_s": (end - start) / 1e9,
        "model_calls": {"main": len(attempts), "sub_agent": len(sub_attempts)},
        "detail": attempts,
    }


def truth(events: dict[str, Any], server_log: list[Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The recording's truth file: what was recorded (`meta`: name, framework, instrumentation,
    command), one row per task, and the raw events they come from (so `recompute` can derive the
    rows again when these rules change, without recording again)."""
    requests = [r if isinstance(r, dict) else asdict(r) for r in server_log]
    requests.sort(key=lambda r: r["received_ns"])
    tasks = sorted(events["tasks"], key=lambda t: t["start_ns"])
    return {**meta, "versions": events.get("versions", {}),
            "tasks": [task_truth(t, requests, events["tools"]) for t in tasks],
            "events": {"tasks": tasks, "tools": events["tools"], "model_calls": requests}}


def recompute(old: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """A truth file's rows derived again from its raw events, with the recording's `meta` now."""
    raw = old["events"]
    return truth({"tasks": raw["tasks"], "tools": raw["tools"], "versions": old.get("versions", {})}, raw["model_calls"], meta)
