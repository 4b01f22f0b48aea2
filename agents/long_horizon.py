"""The long-horizon agent: a coordinator with long-term memory, a document reader and two
specialists it hands sub-tasks to, built on agenttrace's public API as a user's own would be.

    coordinator        recall, remember (memory, a SQLite file under the run's folder),
                       read_document (long texts: two fill the compaction budget),
                       delegate, delegate_parallel
      weather_expert   weather, convert_units
      math_expert      calculator

The runtime recalls from memory before the first step on its own and compacts the history when
the next prompt would pass 90% of the model's context. Each task run writes memory in a
namespace of its own (`memory_scope="task"`), so arms and repeats of a benchmark never read
each other's notes; the pre-seeded facts (`tools/data/memory_seed.json`) are shared.

On a local model the specialists run on one continuous-batching engine over the same weights
(each with its own k controller, drafter copy and prefix cache), so the two sub-agents of
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
    ChatModel,
    Example,
    GenerationParams,
    MemoryStore,
    MemoryUnavailable,
    SubAgent,
    Telemetry,
    ToolCall,
    delegation_tools,
)
from agenttrace.examples.agents.function_calling import EXAMPLES as TOOL_EXAMPLES
from agenttrace.examples.tools import calculator, unit_converter, weather
from agenttrace.examples.tools.documents import make_document_reader

__all__ = ["CONFIG", "EXAMPLES", "SEED_FILE", "build_long_horizon_agent", "seed_facts"]

_log = logging.getLogger(__name__)
SEED_FILE = Path(__file__).resolve().parent.parent / "tools" / "data" / "memory_seed.json"

# One call per tool, as the reference agent's examples (only the last shows a result and the
# answer: small models copy result fields into their arguments otherwise).
EXAMPLES = (
    Example("Read the document handbook-part2.", (ToolCall("read_document", {"name": "handbook-part2"}),)),
    Example("Remember that the demo is on Monday.", (ToolCall("remember", {"text": "The demo is on Monday."}),)),
    Example("Ask the weather expert about Madrid.",
            (ToolCall("delegate", {"agent": "weather_expert", "task": "What is the weather in Madrid?"}),)),
    Example("Ask the weather expert about Oslo and, at the same time, the math expert for 3*4.",
            (ToolCall("delegate_parallel", {"tasks": [{"agent": "weather_expert", "task": "Weather in Oslo?"},
                                                      {"agent": "math_expert", "task": "3*4"}]}),)),
    Example("What is Tom's birthday?", (ToolCall("recall", {"query": "Tom birthday"}),),
            ("- Tom's birthday is on June 2.",), "Tom's birthday is on June 2."),
)

CONFIG = AgentConfig(
    name="long-horizon-agent",
    max_steps=8,  # two documents, a compaction and an answer, with room for a retry
    max_attempts=2,
    deadline_s=600.0,  # a compaction task prefills about 15,000 tokens on a CPU
    params=GenerationParams(max_tokens=128),  # a call handing out two sub-tasks takes about 70 tokens
    recall="task_start",
    memory_scope="task",
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
    its weights (sub-agents at once batch); any other model is shared as it is."""
    from agenttrace import BatchEngine, LocalChatModel

    if not isinstance(model, LocalChatModel) or model.compiled is not None:
        return lambda: model
    weights = model.model
    engine = _ENGINES.get(weights)
    if engine is None:
        cpu = weights.device.type == "cpu"
        # decode passes on one intra-op thread on a CPU (BatchEngine's narrow_threads says why)
        engine = BatchEngine(weights, max_batch=4, narrow_threads=1 if cpu else None)
        _ENGINES[weights] = engine
    return lambda: model.sibling(engine=engine)


def build_long_horizon_agent(model: ChatModel, telemetry: Telemetry, config: AgentConfig = CONFIG, *,
                             workdir: Path | None = None) -> Agent:
    """The coordinator over `model`, its memory in `workdir/memory.sqlite` (a fresh temporary
    folder when None), seeded with the shared facts; its specialists record to `telemetry` too."""
    folder = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="agenttrace-memory-"))
    store = MemoryStore(folder / "memory.sqlite")
    try:
        store.seed(seed_facts())
    except MemoryUnavailable as exc:  # the agent runs without memory; its memory spans say why
        _log.warning("%s", exc)
    specialist = _specialist_models(model)
    deadline = config.deadline_s
    sub_config = replace(_SPECIALIST, deadline_s=min(SPECIALIST_DEADLINE_S, deadline) if deadline else SPECIALIST_DEADLINE_S)
    weather_expert = Agent(specialist(), [weather, unit_converter], telemetry=telemetry, examples=WEATHER_EXAMPLES,
                           config=replace(sub_config, name="weather_expert"))
    math_expert = Agent(specialist(), [calculator], telemetry=telemetry, examples=MATH_EXAMPLES,
                        config=replace(sub_config, name="math_expert"))
    experts = [
        SubAgent("weather_expert", "weather and unit conversions", agent=weather_expert,
                 deadline_s=sub_config.deadline_s or SPECIALIST_DEADLINE_S),
        SubAgent("math_expert", "arithmetic", agent=math_expert, deadline_s=sub_config.deadline_s or SPECIALIST_DEADLINE_S),
    ]
    tools = [make_document_reader(), *delegation_tools(experts)]
    return Agent(model, tools, telemetry=telemetry, examples=EXAMPLES, config=config, memory=store)
