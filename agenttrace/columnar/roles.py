"""Other instrumentations' spans mapped in the query (SPANS.md, "Traces from other
instrumentations"): each convention's `role` (traces/conventions) stated once more in SQL over a
span of the table, in `classify`'s order, and checked against it span for span
(tests/columnar/test_roles.py). The names, keys and reasons are the convention modules' own.

A role is (convention, segment, reason, variant, sure): the convention that recognised the span
('' none), the segment it maps to ('' left out, for `reason`), the attribute set it was
recognised by, and whether the SQL states the role exactly (false where Python's text of a value
is not stated here: a reason quoting a value that is not plain ASCII, an OpenInference kind
`str.upper` may change otherwise).

`ROLES` holds the role of every span of the table that has no `agenttrace.segment` and that a
convention recognises. Where normalise would only map a trace's foreign spans and change nothing
else, the table maps them itself (`apply`: the segment written on the span, with the attributes of
ours its role gives, as normalise's copy has them) and the queries compute the trace's figures:
- *leaves* (network, memory, or left out: an HTTP or database client call, a retriever, an
  embeddings call, a framework's grouping span around ours);
- a model call or tool execution of GenAI, OpenInference or OpenLLMetry inside one of ours (the
  client library's span under our generation, a framework's tool span under our tool execution;
  the task has steps of ours, so no structure rule reads it).
A trace with any other member (an agent, a model call or tool execution elsewhere: the rules infer
tasks, steps and attempts from them, join remote calls and merge call layers; any of ADK's,
pydantic-ai's or vLLM's), with a role the SQL does not state exactly, with a model server's
generation span (ours too: normalise splits the caller's), or holding foreign spans beside our
`agenttrace.inferred` marks (normalise collects them on the task) is `route`d (`ROUTED`): read by
the per-span code (per_trace.py).
"""

from __future__ import annotations

import re

from agenttrace import semconv as sc
from agenttrace.traces.conventions import client, genai, google_adk, openinference, openllmetry, pydantic_ai, vllm

ROLES = "roles"
MEMBERS = (sc.Segment.AGENT.value, sc.Segment.GENERATION.value, sc.Segment.TOOL.value)
_TABLE = f"""CREATE TEMPORARY TABLE {ROLES} (
  i UInt64, trace_id String, name String, convention LowCardinality(String), segment LowCardinality(String), reason String,
  variant LowCardinality(String), route Bool
) ENGINE = Memory"""
_NONE = "tuple('', '', '', '', toUInt8(1))"
# A value Python's repr quotes as is: printable ASCII with no quote or backslash.
_PLAIN = "'^[ -&(-\\\\[\\\\]-~]*$'"
_ASCII = "'^[ -~]*$'"


def _q(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _list(values) -> str:
    return ", ".join(_q(v) for v in values)


_FOREIGN_PREFIXES = ("gen_ai.", "llm.", "openinference.", "traceloop.", "pydantic_ai.", "gcp.vertex.agent.")


def recognisable(s: str = "") -> str:
    """SQL over a span of `spans` (`s`: its alias and a dot) with no agenttrace.segment: true where
    a convention of traces/conventions may recognise it (a superset of what `classify` does: every
    key, name and scope a convention tests first). False: none does, so the span is left out as
    of no known convention, its time other, and its trace stays with the queries."""
    keys = (sc.PAI_LOGFIRE_MSG, *sc.CLIENT_CALL_KEYS)
    prefixes = " OR ".join(f"startsWith(k, '{x}')" for x in _FOREIGN_PREFIXES)
    scopes = (google_adk.SCOPE, google_adk.OI_SCOPE, pydantic_ai.SCOPE)
    return (f"(arrayExists(k -> {prefixes} OR k IN ({_list(keys)}), mapKeys({s}attrs)) "
            f"OR {s}name IN ({_list((sc.VLLM_SPAN_NAME, *pydantic_ai.NAMES))}) "
            f"OR {s}scope IN ({_list(scopes)}) OR endsWith({s}scope, '{openllmetry.SCOPE_SUFFIX}'))")


def _role(convention: str, segment: str = "", reason: str = "", variant: str = "", sure: str = "1") -> str:
    """SQL: a role tuple (each argument SQL, but the convention and segment: text)."""
    return f"tuple({_q(convention)}, {_q(segment)}, {reason or _q('')}, {variant or _q('')}, toUInt8({sure}))"


def _formatted(fmt: str, value: str) -> tuple[str, str]:
    """SQL of a reason `fmt` with its one `{name!r}` field Python's repr of the text `value`, and
    whether that repr is stated exactly (a plain value)."""
    head, tail = re.split(r"\{\w+!r\}", fmt)
    return f"concat({_q(head)}, '\\'', {value}, '\\'', {_q(tail)})", f"match({value}, {_PLAIN})"


class _Span:
    """SQL over one row of `spans` (`p`: its alias and a dot)."""

    def __init__(self, p: str = "") -> None:
        self.p = p
        self.name, self.scope, self.kind = f"{p}name", f"{p}scope", f"{p}kind"

    def has(self, *keys: str) -> str:
        return "(" + " OR ".join(f"mapContains({self.p}attrs, {_q(k)})" for k in keys) + ")"

    def value(self, key: str) -> str:
        return f"{self.p}attrs[{_q(key)}]"

    def is_text(self, key: str) -> str:
        return f"startsWith({self.value(key)}, 's')"

    def text(self, key: str) -> str:
        return f"substring({self.value(key)}, 2)"

    def equals(self, key: str, text: str) -> str:
        """The attribute is the text `text` (as Python's `==`: a value of another type never is)."""
        return f"({self.value(key)} = {_q('s' + text)})"

    def any_key(self, prefix: str) -> str:
        return f"arrayExists(k -> startsWith(k, {_q(prefix)}), mapKeys({self.p}attrs))"

    def first_text(self, *keys: str) -> str:
        """conventions.first_text as typed text ('s...'), NULL where no key holds a non-empty text."""
        picks = ", ".join(f"{self.is_text(k)} AND length({self.value(k)}) > 1, {self.value(k)}" for k in keys)
        return f"multiIf({picks}, NULL)"

    def first_count(self, *keys: str) -> str:
        """int() of conventions.first_number as typed text ('i...'), NULL where no key holds a
        finite number under 1e18 (a boolean is none)."""
        def number(k: str) -> str:
            return f"toFloat64OrNull(substring({self.value(k)}, 2))"

        def count(k: str) -> str:  # an integer's own digits; a double truncated toward zero, as int()
            digits = f"startsWith({self.value(k)}, 'i') AND match({self.value(k)}, '^i-?[0-9]+$')"
            return f"if({digits}, {self.value(k)}, concat('i', toString(toInt64({number(k)}))))"

        picks = ", ".join(f"substring({self.value(k)}, 1, 1) IN ('i', 'd') AND isFinite(ifNull({number(k)}, nan)) "
                          f"AND abs({number(k)}) < 1e18, {count(k)}" for k in keys)
        return f"multiIf({picks}, NULL)"


def _vllm(s: _Span) -> str:
    return f"if({s.name} = {_q(sc.VLLM_SPAN_NAME)} OR {s.has(*vllm.LATENCIES)}, {_role(vllm.NAME, 'generation')}, {_NONE})"


def _openinference(s: _Span) -> str:
    kind = f"upper({s.text(sc.OI_SPAN_KIND)})"
    segments = ", ".join(f"{kind} = {_q(k)}, {_role(openinference.NAME, v.value)}" for k, v in openinference.SEGMENTS.items())
    reasons = f"transform({kind}, [{_list(openinference.LEFT_OUT)}], [{_list(openinference.LEFT_OUT.values())}], '')"
    unknown, plain = _formatted(openinference.UNKNOWN_KIND, kind)
    sure = f"{plain} AND match({s.text(sc.OI_SPAN_KIND)}, {_ASCII})"  # str.upper maps some letters past ASCII
    return (f"multiIf(NOT {s.is_text(sc.OI_SPAN_KIND)}, {_NONE}, {segments}, "
            f"{kind} IN ({_list(openinference.LEFT_OUT)}), {_role(openinference.NAME, reason=reasons)}, "
            f"{_role(openinference.NAME, reason=unknown, sure=sure)})")


def _genai(s: _Span) -> str:
    op, known = s.text(sc.GEN_AI_OPERATION_NAME), s.is_text(sc.GEN_AI_OPERATION_NAME)
    variant = f"multiIf({s.has(sc.GEN_AI_PROVIDER_NAME)}, {_q(genai.CURRENT)}, {s.has(sc.GEN_AI_SYSTEM)}, {_q(genai.BEFORE_1_37)}, '')"
    reasons = f"transform({op}, [{_list(genai.LEFT_OUT)}], [{_list(genai.LEFT_OUT.values())}], '')"
    unknown, plain = _formatted(genai.UNKNOWN_OPERATION, op)

    def role(segment: str = "", reason: str = "", sure: str = "true") -> str:
        return _role(genai.NAME, segment, reason, variant, sure)

    return (f"multiIf(NOT {known}, if({s.any_key(sc.GEN_AI_NAMESPACE)}, {role(reason=_q(genai.NO_OPERATION))}, {_NONE}), "
            f"{op} IN ({_list(sc.GEN_AI_OPS_GENERATION)}), {role('generation')}, "
            f"{op} = {_q(sc.OP_EXECUTE_TOOL)}, {role('tool')}, "
            f"{op} IN ({_list((sc.OP_INVOKE_AGENT, sc.OP_INVOKE_WORKFLOW))}), {role('agent')}, "
            f"{op} IN ({_list(sc.GEN_AI_OPS_MEMORY)}), {role('memory')}, "
            f"{op} IN ({_list(genai.LEFT_OUT)}), {role(reason=reasons)}, {role(reason=unknown, sure=plain)})")


def _google_adk(s: _Span) -> str:
    # its base role is OpenInference's where the span has OpenInference's kind, else GenAI's; a
    # base that is OpenInference's (or any, on OpenInference's scope) stands, else it is ADK's.
    # Its members are never stated exactly (sure 0: routed): a tool whose result says it failed
    # is counted under ADK with an error.type, and its results are JSON the SQL does not read.
    base = f"if({s.has(sc.OI_SPAN_KIND)}, {_openinference(s)}, {_genai(s)})"
    adk = google_adk.NAME
    return (f"multiIf(NOT ({s.scope} IN ({_list((google_adk.SCOPE, google_adk.OI_SCOPE))}) OR {s.any_key(google_adk.ADK_KEYS)}), "
            f"{_NONE}, {s.equals(sc.GEN_AI_TOOL_NAME, google_adk.MERGED)}, {_role(adk, reason=_q(google_adk.MERGED_REASON))}, "
            f"{s.name} = 'call_llm' AND NOT {s.has(sc.GEN_AI_OPERATION_NAME, sc.OI_SPAN_KIND)}, "
            f"{_role(adk, reason=_q(google_adk.CALL_LLM_REASON))}, "
            f"({base} AS adk_base).1 = '', {_NONE}, "
            f"adk_base.2 IN ({_list(MEMBERS)}), tuple(if({s.scope} = {_q(google_adk.OI_SCOPE)} OR "
            f"adk_base.1 = {_q(openinference.NAME)}, adk_base.1, {_q(adk)}), adk_base.2, adk_base.3, adk_base.4, toUInt8(0)), "
            f"{s.scope} = {_q(google_adk.OI_SCOPE)} OR adk_base.1 = {_q(openinference.NAME)}, adk_base, "
            f"tuple({_q(adk)}, adk_base.2, adk_base.3, adk_base.4, adk_base.5))")


def _openllmetry(s: _Span) -> str:
    kind, name = s.text(sc.TL_SPAN_KIND), openllmetry.NAME
    segments = ", ".join(f"{kind} = {_q(k)}, {_role(name, v.value)}" for k, v in openllmetry.KINDS.items())
    reasons = f"transform({kind}, [{_list(openllmetry.LEFT_OUT)}], [{_list(openllmetry.LEFT_OUT.values())}], '')"
    unknown, plain = _formatted(openllmetry.UNKNOWN_KIND, kind)
    dot = f"position({s.name}, '.')"  # name.partition('.'): a vendor before the first dot, the operation after it
    llm = (f"({s.has(*openllmetry.LLM_MARKS)} OR ({dot} > 1 AND substring({s.name}, {dot} + 1) IN ({_list(openllmetry.LLM_OPS)}) "
           f"AND endsWith({s.scope}, {_q(openllmetry.SCOPE_SUFFIX)})))")
    return (f"multiIf({s.is_text(sc.TL_SPAN_KIND)}, multiIf({segments}, {kind} IN ({_list(openllmetry.LEFT_OUT)}), "
            f"{_role(name, reason=reasons)}, {_role(name, reason=unknown, sure=plain)}), "
            f"NOT {llm}, {_NONE}, "
            f"{s.equals(sc.TL_LLM_REQUEST_TYPE, 'embedding')} OR endsWith({s.name}, '.embeddings'), "
            f"{_role(name, reason=_q(openllmetry.EMBEDDINGS))}, "
            f"{_role(name, 'generation', variant=_q(openllmetry.LLM_VARIANT))})")


def _pydantic_ai(s: _Span) -> str:
    name = pydantic_ai.NAME
    ours = (f"({s.scope} = {_q(pydantic_ai.SCOPE)} OR {s.name} IN ({_list(pydantic_ai.NAMES)}) OR "
            f"({s.has(sc.PAI_LOGFIRE_MSG)} AND ({s.has(sc.PAI_AGENT_NAME)} OR {s.any_key(sc.PAI_NAMESPACE)})))")
    op = s.text(sc.GEN_AI_OPERATION_NAME)
    old = {segment.value: n for n, segment in pydantic_ai.OLD_NAMES.items()}
    unknown, plain = _formatted(pydantic_ai.NO_SEGMENT, s.name)
    return (f"multiIf(NOT {ours}, {_NONE}, "
            f"{s.is_text(sc.GEN_AI_OPERATION_NAME)} AND {op} IN ({_list(sc.GEN_AI_OPS_GENERATION)}), {_role(name, 'generation')}, "
            f"{s.equals(sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT)} OR {s.name} = {_q(old['agent'])}, {_role(name, 'agent')}, "
            f"{s.equals(sc.GEN_AI_OPERATION_NAME, sc.OP_EXECUTE_TOOL)} OR {s.name} = {_q(old['tool'])}, {_role(name, 'tool')}, "
            f"{s.name} = {_q(pydantic_ai.GROUPING)}, {_role(name, reason=_q(pydantic_ai.GROUPING_REASON))}, "
            f"{_role(name, reason=unknown, sure=plain)})")


def _client(s: _Span) -> str:
    return f"if({s.kind} = 'CLIENT' AND {s.has(*sc.CLIENT_CALL_KEYS)}, {_role(client.NAME, 'network')}, {_NONE})"


_CONVENTIONS = (_vllm, _google_adk, _openinference, _openllmetry, _pydantic_ai, _genai, _client)  # classify's order


# -- the attributes of ours a mapped span gains (its role's `attributes`, where it lacks them) ------
def _entries(pairs: list[tuple[str, str]]) -> str:
    """SQL: a Map of the (key, typed text or NULL) `pairs` that are not NULL."""
    tuples = "[" + ", ".join(f"tuple({_q(k)}, {v})" for k, v in pairs) + "]"
    kept = f"arrayFilter(x -> x.2 IS NOT NULL, {tuples})"
    return f"mapFromArrays(arrayMap(x -> x.1, {kept}), arrayMap(x -> assumeNotNull(x.2), {kept}))"


def _genai_generation(s: _Span) -> list[tuple[str, str]]:  # genai.generation_attributes
    return [(sc.GEN_AI_PROVIDER_NAME, s.first_text(sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM)),
            (sc.GEN_AI_USAGE_INPUT_TOKENS, s.first_count(sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_PROMPT_TOKENS)),
            (sc.GEN_AI_USAGE_OUTPUT_TOKENS, s.first_count(sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS)),
            (sc.GEN_AI_REQUEST_MODEL, s.first_text(sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL))]


def _tool_name(s: _Span, key: str, fallback: str) -> list[tuple[str, str]]:
    return [(sc.GEN_AI_TOOL_NAME, f"ifNull({s.first_text(key)}, concat('s', {fallback}))")]


def _last_dot(name: str) -> str:
    """SQL: `name` before its last dot (name.rsplit('.', 1)[0]), `name` without one."""
    return (f"if(position({name}, '.') > 0, substring({name}, 1, length({name}) - position(reverse({name}), '.')), "
            f"{name})")


# (convention, segment) -> what a role of that convention gives a span of that segment. A member
# (a model call, a tool execution) stays in the table only where it is one of these and sits in a
# model call or tool execution of ours (`_NESTED`): there normalise maps it and changes nothing
# else (no structure rule reads it: the task has steps of ours, it is under an attempt, it is not
# a step's child).
_DERIVED = {
    (genai.NAME, "generation"): _genai_generation,
    (openllmetry.NAME, "generation"): _genai_generation,
    (openinference.NAME, "generation"): lambda s: [
        (sc.GEN_AI_REQUEST_MODEL, s.first_text(sc.OI_LLM_MODEL_NAME)),
        (sc.GEN_AI_PROVIDER_NAME, s.first_text(sc.OI_LLM_PROVIDER, sc.OI_LLM_SYSTEM)),
        (sc.GEN_AI_USAGE_INPUT_TOKENS, s.first_count(sc.OI_LLM_TOKENS_PROMPT)),
        (sc.GEN_AI_USAGE_OUTPUT_TOKENS, s.first_count(sc.OI_LLM_TOKENS_COMPLETION))],
    (genai.NAME, "tool"): lambda s: _tool_name(
        s, sc.GEN_AI_TOOL_NAME, f"trimBoth(if(startsWith({s.name}, {_q(sc.OP_EXECUTE_TOOL)}), "
                                f"substring({s.name}, {len(sc.OP_EXECUTE_TOOL) + 1}), {s.name}))"),
    (openinference.NAME, "tool"): lambda s: _tool_name(s, sc.OI_TOOL_NAME, s.name),
    (openllmetry.NAME, "tool"): lambda s: _tool_name(s, sc.TL_ENTITY_NAME, _last_dot(s.name)),
}
_STAYS = "(" + " OR ".join(f"(r.1 = {_q(c)} AND r.2 = {_q(g)})" for c, g in _DERIVED) + ")"
# The span's parent is a model call or tool execution of ours, under an attempt of ours; and its
# own name is plain (str.strip, which the GenAI tool name goes through, strips more than spaces).
_NESTED = f"par.h != 0 AND gp.h != 0 AND match(c.name, {_ASCII})"


def table() -> str:
    """SQL creating the (empty) roles table."""
    return _TABLE


def find(engine, lo: int, hi: int) -> None:
    """The roles of the spans of input orders lo..hi of `engine`'s table (an Engine) into ROLES,
    and applied where the table maps them."""
    if not engine.scalar(candidates(lo, hi)):
        return
    engine.q(insert(lo, hi))
    found = engine.table(mapped(lo, hi))[0]
    for convention, segment in zip(found["convention"], found["segment"], strict=True):
        engine.q(apply(convention, segment, lo, hi))


def candidates(lo: int, hi: int) -> str:
    """SQL: how many spans of input orders lo..hi a role may be found for (`insert` costs its plan,
    ~0.2 s, even where none is: 1M spans of ours, measured)."""
    return f"SELECT count() FROM spans WHERE i BETWEEN {lo} AND {hi} AND segment = '' AND {recognisable()}"


def insert(lo: int, hi: int) -> str:
    """SQL: the roles of the table's spans of input orders lo..hi with no agenttrace.segment that
    a convention recognises, into ROLES. Each convention's role is a column of its own; the first
    that recognises the span gives its role, as in `classify`. Routed: a member, but one nested in
    ours (`_DERIVED`), and a role not stated exactly."""
    s = _Span()
    columns = ", ".join(f"{f(s)} AS c{n}" for n, f in enumerate(_CONVENTIONS))
    pick = "multiIf(" + ", ".join(f"c{n}.1 != '', c{n}" for n in range(len(_CONVENTIONS))) + f", {_NONE})"
    ours = f"i NOT IN (SELECT i FROM {ROLES})"  # the roles of the files before: theirs, mapped
    route = f"NOT r.5 OR (r.2 IN ({_list(MEMBERS)}) AND NOT ({_STAYS} AND {_NESTED}))"
    return f"""INSERT INTO {ROLES} SELECT c.i, c.trace_id, c.name, r.1, r.2, r.3, r.4, {route}
FROM (SELECT i, trace_id, name, ph, {pick} AS r FROM (
  SELECT i, trace_id, name, ph, {columns} FROM spans WHERE i BETWEEN {lo} AND {hi} AND segment = '' AND {recognisable()})) AS c
LEFT JOIN (SELECT h, ph FROM spans WHERE segment IN ('generation', 'tool') AND {ours}) AS par ON par.h = c.ph
LEFT JOIN (SELECT h FROM spans WHERE segment = 'attempt' AND {ours}) AS gp ON gp.h = par.ph
WHERE r.1 != ''
SETTINGS join_use_nulls = 0"""


def mapped(lo: int, hi: int) -> str:
    """SQL: (convention, segment) of the roles of input orders lo..hi that map spans of traces not
    routed."""
    return f"SELECT DISTINCT convention, segment FROM {ROLES} WHERE i BETWEEN {lo} AND {hi} AND segment != '' AND NOT route"


def apply(convention: str, segment: str, lo: int, hi: int) -> str:
    """SQL: `segment` written on the spans of input orders lo..hi that a role of `convention` maps
    to it, unless routed, with what the role gives them where they lack it, and the segment under
    agenttrace.segment (normalise's copy: `{**role.attributes, **span.attributes, SEGMENT: ...}`)."""
    derive = _DERIVED.get((convention, segment))
    gained = "attrs" if derive is None else f"mapUpdate({_entries(derive(_Span()))}, attrs)"
    return (f"ALTER TABLE spans UPDATE segment = {_q(segment)}, "
            f"attrs = mapUpdate({gained}, map({_q(sc.SEGMENT)}, {_q('s' + segment)})) "
            f"WHERE i IN (SELECT i FROM {ROLES} WHERE i BETWEEN {lo} AND {hi} AND convention = {_q(convention)} "
            f"AND segment = {_q(segment)} AND NOT route) SETTINGS mutations_sync = 2")


# A trace is routed for a role the table does not map itself; for a model server's generation
# span, ours too (traces/remote.py splits the caller's, and the input lists the split as
# inferred); and, holding another instrumentation's spans, for `agenttrace.inferred` marks of
# ours (normalise collects them on the task).
ROUTED = (f"trace_id IN (SELECT trace_id FROM {ROLES} WHERE route) OR trace_id IN (SELECT trace_id FROM spans WHERE "
          f"segment = '{sc.Segment.GENERATION.value}' AND kind = 'SERVER') OR (trace_id IN (SELECT trace_id FROM {ROLES}) AND "
          f"mapContains(attrs, {_q(sc.INFERRED)}))")
DROP_ROUTED = f"ALTER TABLE {ROLES} DELETE WHERE trace_id IN (SELECT trace_id FROM {{routed}}) SETTINGS mutations_sync = 2"
