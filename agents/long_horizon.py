"""The long-horizon agents: three agents over one long-term memory, built on agenttrace's public
API as a user's own would be; each task of the suite names the one it is for (`Task.agent`).

    assistant          remember, recall (memory: a SQLite file under the run's folder; the
                       runtime also recalls before the first step on its own)
    reader             read_documents (one or two long texts at once: two pass the compaction
                       budget), remember, recall; its history is compacted when the next prompt
                       would pass 90% of the model's context
    coordinator        delegate, delegate_parallel to its specialists:
      weather_expert   weather, convert_units
      math_expert      calculator

Why three agents and not one with every tool: given all of them, the bundled 135M model chose
`delegate` for every task of a 16-task probe (documents and memory questions included), so the
suite would never have read a document or compacted anything. Each task run writes memory in a
namespace of its own (`memory_scope="task"`), so arms and repeats of a benchmark never read each
other's notes; the pre-seeded facts (`tools/data/memory_seed.json`) are shared.

On a local model the specialists run on one continuous-batching engine over the same weights
(each with its own k controller, drafter fork and prefix cache), so the two sub-agents of
`delegate_parallel` share forward passes instead of taking turns.
"""

from __future__ import annotations

import json
import logging
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from agenttrace import (
    Agent,
    AgentConfig,
    CancelToken,
    ChatModel,
    Example,
    GenerationParams,
    MemoryStore,
    MemoryUnavailable,
    SubAgent,
    Task,
    TaskResult,
    Telemetry,
    ToolCall,
    delegation_tools,
)
from agenttrace.examples.agents.function_calling import EXAMPLES as TOOL_EXAMPLES
from agenttrace.examples.tools import calculator, unit_converter, weather
from agenttrace.examples.tools.documents import make_document_reader

__all__ = ["CONFIG", "EXAMPLES", "SEED_FILE", "LongHorizonAgents", "build_long_horizon_agent", "seed_facts"]

_log = logging.getLogger(__name__)
SEED_FILE = Path(__file__).resolve().parent.parent / "tools" / "data" / "memory_seed.json"

# Per agent, one call per tool and a last example with a result and the answer (only the last
# shows them: small models copy result fields into their arguments otherwise).
ASSISTANT_EXAMPLES = (
    Example("Remember that the demo is on Monday.", (ToolCall("remember", {"text": "The demo is on Monday."}),)),
    Example("What is Tom's birthday?", (ToolCall("recall", {"query": "Tom birthday"}),),
            ("- Tom's birthday is on June 2.",), "Tom's birthday is on June 2."),
)
READER_EXAMPLES = (
    Example("Remember that the audit is in May.", (ToolCall("remember", {"text": "The audit is in May."}),)),
    Example("Read the documents survey-b and handbook-part2, then tell me how many days a week staff may work "
            "remotely.", (ToolCall("read_documents", {"names": ["survey-b", "handbook-part2"]}),),
            ("=== survey-b ===\nCity survey, second half. ... Oslo scored 8.1, below the first half's best. ...\n"
             "=== handbook-part2 ===\nStaff handbook, part two. ... Remote work is allowed up to three days a week. ...",),
            "Up to three days a week."),
)
COORDINATOR_EXAMPLES = (
    Example("Ask the weather expert about Oslo and, at the same time, the math expert for 3*4.",
            (ToolCall("delegate_parallel", {"weather_expert": "Weather in Oslo?", "math_expert": "3*4"}),)),
    Example("Ask the math expert for 6*7.", (ToolCall("delegate", {"agent": "math_expert", "task": "6*7"}),),
            ("42",), "6*7 is 42."),
)
EXAMPLES = {"assistant": ASSISTANT_EXAMPLES, "reader": READER_EXAMPLES, "coordinator": COORDINATOR_EXAMPLES}

CONFIG = AgentConfig(
    name="long-horizon",  # each agent's name is its own: "assistant", "reader", "coordinator"
    max_steps=8,  # two documents, a compaction and an answer, with room for a retry
    max_attempts=2,
    deadline_s=600.0,  # a compaction task prefills about 15,000 tokens on a CPU
    params=GenerationParams(max_tokens=128),  # a call handing out two sub-tasks takes about 70 tokens
    recall="task_start",
    memory_scope="task",
    # The bundled 135M model answers from its own weights what it should look up or delegate (in
    # a probe of 8 delegation tasks it delegated none): its first step must call a tool.
    first_step="tool",
    # Decode every reply under the grammar of a decision: without it the 135M model's replies after
    # a long document were the document's own sentences, and its tool arguments ran on past the
    # budget (every 12-task probe step that failed did so).
    constrained=True,
)

_SPECIALIST = AgentConfig(max_steps=3, max_attempts=2, deadline_s=120.0, params=GenerationParams(max_tokens=64))
WEATHER_EXAMPLES = (
    TOOL_EXAMPLES[0],
    Example("Convert 20 C to F.", (ToolCall("convert_units", {"value": 20, "from_unit": "C", "to_unit": "F"}),),
            ('{"value": 68.0, "unit": "F"}',), "20 C is 68 F."),
)
MATH_EXAMPLES = (TOOL_EXAMPLES[3],)
SPECIALIST_DEADLINE_S = 120.0

# one batching engine per set of weights, for every specialist built over them
_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def seed_facts(path: Path = SEED_FILE) -> list[str]:
    return list(json.loads(path.read_text(encoding="utf-8"))["facts"])


def _specialist_models(model: ChatModel) -> Callable[[], ChatModel]:
    """What each specialist generates with: on a local model, a sibling on the shared engine of
    its weights (sub-agents at once batch), or a sibling of its own where the model takes no engine
    (llama.cpp's kernels: a context each); any other model is shared as it is."""
    from agenttrace import BatchEngine, LocalChatModel

    if not isinstance(model, LocalChatModel) or model.compiled is not None:
        return lambda: model
    if not model.batches:
        return lambda: model.sibling()
    weights = model.model
    engine = _ENGINES.get(weights)
    if engine is None:
        cpu = weights.device.type == "cpu"
        # decode passes on one intra-op thread on a CPU (BatchEngine's narrow_threads says why)
        engine = BatchEngine(weights, max_batch=4, narrow_threads=1 if cpu else None)
        _ENGINES[weights] = engine
    return lambda: model.sibling(engine=engine)


class LongHorizonAgents:
    """The suite's agents behind one `run`: each task goes to the agent it names."""

    def __init__(self, agents: dict[str, Agent]) -> None:
        self.agents = agents

    def run(self, task: Task, *, cancel: CancelToken | None = None) -> TaskResult:
        name = task.agent or "assistant"
        if name not in self.agents:
            raise ValueError(f"task {task.id} names agent {name!r}; this suite has {', '.join(self.agents)}")
        return self.agents[name].run(task, cancel=cancel)


def build_long_horizon_agent(model: ChatModel, telemetry: Telemetry, config: AgentConfig = CONFIG, *,
                             workdir: Path | None = None) -> LongHorizonAgents:
    """The suite's agents over `model`, recording to `telemetry`, their memory in
    `workdir/memory.sqlite` (a fresh temporary folder when None), seeded with the shared facts."""
    folder = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="agenttrace-memory-"))
    store = MemoryStore(folder / "memory.sqlite")
    try:
        store.seed(seed_facts())
    except MemoryUnavailable as exc:  # the agents run without memory; their memory spans say why
        _log.warning("%s", exc)
    specialist = _specialist_models(model)
    deadline = min(SPECIALIST_DEADLINE_S, config.deadline_s) if config.deadline_s else SPECIALIST_DEADLINE_S
    sub = replace(_SPECIALIST, deadline_s=deadline)
    weather_expert = Agent(specialist(), [weather, unit_converter], telemetry=telemetry, examples=WEATHER_EXAMPLES,
                           config=replace(sub, name="weather_expert"))
    math_expert = Agent(specialist(), [calculator], telemetry=telemetry, examples=MATH_EXAMPLES,
                        config=replace(sub, name="math_expert"))
    experts = [SubAgent("weather_expert", "weather and unit conversions", agent=weather_expert, deadline_s=deadline),
               SubAgent("math_expert", "arithmetic", agent=math_expert, deadline_s=deadline)]
    return LongHorizonAgents({
        "assistant": Agent(model, [], telemetry=telemetry, examples=ASSISTANT_EXAMPLES, memory=store,
                           config=replace(config, name="assistant")),
        "reader": Agent(model, [make_document_reader()], telemetry=telemetry, examples=READER_EXAMPLES, memory=store,
                        config=replace(config, name="reader")),
        "coordinator": Agent(model, delegation_tools(experts), telemetry=telemetry, examples=COORDINATOR_EXAMPLES,
                             config=replace(config, name="coordinator", recall="off")),
    })
