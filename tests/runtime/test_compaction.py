"""Context compaction: when it runs, its token accounting, the summary's generation as a child
span, what it costs the prefix cache, and a compaction that fails."""

from __future__ import annotations

import pytest
from opentelemetry.trace import StatusCode

from agenttrace import Agent, AgentConfig, FakeClock, Message, Task, Tool
from agenttrace import semconv as sc
from agenttrace.instrument.model_spans import traced_model
from agenttrace.runtime.compaction import (
    SUMMARY_PREFIX,
    CompactionConfig,
    Compactor,
    TokenCounter,
    default_budget,
    extractive_summary,
    split_turns,
)
from agenttrace.testing import ScriptedModel, ScriptedReply, capture_telemetry, spans_by_name

REPORT = ("Incident report. " + "The api gateway restarted twice. " * 6 + "Root cause: disk full on db-3. "
          + "Filler about the weather and lunch. " * 8)


def read_tool() -> Tool:
    def read(name: str) -> str:
        return f"[{name}] " + REPORT

    return Tool("read", "Read a report.", {"type": "object", "properties": {"name": {"type": "string"}},
                                          "required": ["name"], "additionalProperties": False}, read,
                isolation="thread")


def call(name: str) -> str:
    return '{"tool": "read", "arguments": {"name": "%s"}}' % name


def run_agent(replies, *, budget: int, summarizer: str = "extractive", keep_turns: int = 1):
    clock = FakeClock()
    tel, exporter = capture_telemetry(clock)
    model = ScriptedModel(replies, clock)
    cfg = AgentConfig(name="reader", max_steps=5,
                      compaction=CompactionConfig(budget_tokens=budget, summarizer=summarizer, keep_turns=keep_turns))
    agent = Agent(model, [read_tool()], telemetry=tel, config=cfg)
    result = agent.run(Task(id="t", prompt="Read the March and April reports: what was the root cause?"))
    return result, model, exporter.get_finished_spans(), agent


def test_default_budget_leaves_room_for_the_reply():
    assert default_budget(8192, 64) == 7308
    assert default_budget(None, 64) is None


def test_turns_and_the_extractive_summary_keep_what_the_request_asks_for():
    msgs = [Message("assistant", call("march")), Message("user", REPORT), Message("assistant", call("april")),
            Message("user", "short")]
    turns = split_turns(msgs)
    assert [len(t) for t in turns] == [2, 2]
    text = extractive_summary(turns[:1], "what was the root cause?", 200)
    assert text.startswith('read({"name": "march"}): ') and "Root cause: disk full on db-3." in text
    assert "lunch" not in text  # lines sharing no word with the request are left out


def test_over_budget_history_is_compacted_between_steps_with_its_token_accounting():
    replies = [call("march"), call("april"), call("may"), '{"answer": "disk full on db-3"}']
    result, model, spans, agent = run_agent(replies, budget=400)
    assert result.outcome is sc.TaskOutcome.COMPLETED and result.compactions >= 1
    named = spans_by_name(spans)
    (agent_span,) = named["invoke_agent reader"]
    first = named["compact_context"][0]
    assert first.parent.span_id == agent_span.context.span_id  # between steps, not in an attempt
    a = first.attributes
    assert a[sc.SEGMENT] == "compaction" and a[sc.COMPACTION_POLICY] == "extractive" and a[sc.COMPACTION_BUDGET] == 400
    assert a[sc.COMPACTION_TOKENS_BEFORE] > 400 >= a[sc.COMPACTION_TOKENS_AFTER]
    # the next generation's prompt is what the span counted: system, request, summary, latest turn
    counter = TokenCounter(model)
    after = next(c for c in model.calls if any(m.content.startswith(SUMMARY_PREFIX) for m in c))
    assert counter.count(after) == a[sc.COMPACTION_TOKENS_AFTER]
    assert after[0].role == "system" and after[1].content.startswith("Read the March")
    assert after[2].content.startswith(SUMMARY_PREFIX) and after[-1].content.startswith("Tool result: [")
    assert a[sc.COMPACTION_TURNS] >= 1 and a[sc.COMPACTION_REPREFILL_TOKENS] > 0


def test_the_models_summary_is_a_child_generation_of_the_compaction():
    replies = [call("march"), call("april"), ScriptedReply("Root cause: disk full on db-3.", prefill_s=0.01),
               '{"answer": "disk full on db-3"}']
    result, model, spans, _ = run_agent(replies, budget=400, summarizer="model")
    assert result.outcome is sc.TaskOutcome.COMPLETED
    named = spans_by_name(spans)
    (compaction,) = named["compact_context"]
    children = [s for s in spans if s.parent and s.parent.span_id == compaction.context.span_id]
    assert [s.name for s in children] == ["chat scripted-model"]
    summary_prompt = model.calls[2]
    assert summary_prompt[-1].content.startswith("Before you go on")
    # it continues the conversation the cache holds: the same head and old turns, in order
    assert summary_prompt[:-1] == model.calls[1][: len(summary_prompt) - 1]
    assert model.calls[3][2].content == SUMMARY_PREFIX + "Root cause: disk full on db-3."
    assert compaction.attributes[sc.COMPACTION_TOKENS_AFTER] < compaction.attributes[sc.COMPACTION_TOKENS_BEFORE]


@pytest.mark.parametrize("summary", ["", "raise"])
def test_a_failed_compaction_keeps_the_context_and_says_why(summary):
    class Failing(ScriptedModel):
        def chat(self, messages, params, *, cancel=None):
            if messages[-1].content.startswith("Before you go on") and summary == "raise":
                self.calls.append(list(messages))
                raise RuntimeError("the summary model fell over")
            return super().chat(messages, params, cancel=cancel)

    clock = FakeClock()
    tel, exporter = capture_telemetry(clock)
    script = [call("march"), call("april"), '{"answer": "disk full"}']
    if summary == "":
        script.insert(2, "   ")
    model = Failing(script, clock)
    cfg = AgentConfig(name="reader", compaction=CompactionConfig(budget_tokens=400, summarizer="model"), max_steps=3)
    agent = Agent(model, [read_tool()], telemetry=tel, config=cfg)
    result = agent.run(Task(id="t", prompt="Read the reports: what was the root cause?"))
    assert result.outcome is sc.TaskOutcome.COMPLETED and result.compactions == 0
    (compaction,) = spans_by_name(exporter.get_finished_spans())["compact_context"]
    assert compaction.status.status_code is StatusCode.ERROR
    assert compaction.attributes[sc.ERROR_TYPE] == ("summary_failed" if summary == "raise" else "summary_empty")
    assert "context is left as it was" in compaction.status.description
    a = compaction.attributes
    assert a[sc.COMPACTION_TOKENS_AFTER] == a[sc.COMPACTION_TOKENS_BEFORE]
    last = model.calls[-1]
    assert not any(m.content.startswith(SUMMARY_PREFIX) for m in last)  # the context as it was
    assert sum(m.content.startswith("Tool result:") for m in last) == 2


def test_compaction_costs_the_prefix_cache_what_the_span_says():
    """On a real model and tokenizer with the prefix cache: after compaction the cache serves
    only the unchanged head, and the tokens it no longer serves are the span's reprefill_tokens."""
    from agenttrace import GenerationParams
    from agenttrace.generation.local import LocalChatModel
    from tests.serve.test_serve_abuse import tiny_loaded

    loaded = tiny_loaded()
    local = LocalChatModel(loaded.model, loaded.tokenizer, name="tiny", prefix_cache=True)
    tel, exporter = capture_telemetry(FakeClock())
    history = [Message("system", "You read reports."), Message("user", "root cause?"),
               Message("assistant", call("march")), Message("user", "the disk was full " * 4),
               Message("assistant", call("april")), Message("user", "the disk again")]
    p = GenerationParams(max_tokens=4)
    local.chat(history, p)  # the cache now holds this prompt (and the reply)
    counter = TokenCounter(local)
    before = counter.count(history)
    compactor = Compactor(CompactionConfig(budget_tokens=before - 1, summarizer="extractive", keep_turns=1),
                          traced_model(local, telemetry=tel), local, max_tokens=4)
    done = compactor.compact(history, 2, "root cause?", before, history, telemetry=tel)
    assert done.messages is not None and done.tokens_after < before
    compacted = local.chat(done.messages, p)
    uncompacted = local.chat(history, p)
    ids_c, ids_h = counter.ids(done.messages), counter.ids(history)
    common = next(i for i, (a, b) in enumerate(zip(ids_c, ids_h)) if a != b)
    assert compacted.cached_input_tokens == common  # the head: system prompt and request
    assert uncompacted.cached_input_tokens == len(ids_h) - 1  # all but the last token, as ever
    lost = uncompacted.cached_input_tokens - compacted.cached_input_tokens
    assert done.reprefill_tokens == len(ids_h) - common and lost == done.reprefill_tokens - 1
    (span,) = spans_by_name(exporter.get_finished_spans())["compact_context"]
    assert span.attributes[sc.COMPACTION_REPREFILL_TOKENS] == done.reprefill_tokens
