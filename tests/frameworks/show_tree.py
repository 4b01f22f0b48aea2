"""Print a trace file's span tree (name, kind, status, times from the root, the convention's own
kind and tool/model names; the output of a failed tool span): for reading what a framework records.

    .venv/bin/python tests/frameworks/show_tree.py traces/frameworks/NAME.jsonl [MAX_ROOTS]
"""
import sys, json
from agenttrace.traces.load import load_spans
loaded = load_spans([sys.argv[1]])
spans = loaded.spans
by_parent = {}
for s in spans: by_parent.setdefault(s.parent_id, []).append(s)
ids = {s.span_id for s in spans}
roots = sorted([s for s in spans if not s.parent_id or s.parent_id not in ids], key=lambda s: s.start_ns)
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 10**9
keys = ("openinference.span.kind","traceloop.span.kind","gen_ai.operation.name","gen_ai.tool.name","tool.name","llm.model_name")
def show(s, d, t0):
    a = s.attributes
    tag = " ".join(f"{k.split('.')[-2] if k.count('.')>1 else k}={a[k]}" for k in keys if k in a)
    out = str(a.get("output.value", ""))[:60].replace("\n"," ")
    print(f"{'  '*d}{s.name} [{s.kind} {s.status}] {(s.start_ns-t0)/1e6:.1f}-{(s.end_ns-t0)/1e6:.1f}ms {tag} {('out='+out) if out and s.status!='OK' and 'TOOL' in tag else ''}")
    for k in sorted(by_parent.get(s.span_id, []), key=lambda x: x.start_ns): show(k, d+1, t0)
for r in roots[:limit]:
    show(r, 0, r.start_ns); print()
