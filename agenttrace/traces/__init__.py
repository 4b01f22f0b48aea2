"""Trace input: other instrumentations' traces mapped onto our span tree, so the report computes
every figure the same way for any trace (SPANS.md, "Traces from other instrumentations"). No
torch here.

    conventions/   one module per convention family: which wrote a span, and what it is
    normalise.py   the entry point: map spans, then infer what the trace does not record;
                   `Reading`: per input, what was recognised, mapped, left out, inferred
    foreign_structure.py   tasks, steps, attempts and decision moments from generations and tools
    remote.py      a client generation with its model server's span: network, queue, prefill
    index.py       the spans by id and parent, edited as copies
"""

from agenttrace.traces.normalise import Normalised, Reading, normalise

__all__ = ["Normalised", "Reading", "normalise"]
