"""The memory store (a real SQLite file with FTS5), its tools and the runtime's own recall, on a
scripted model and a fake clock; corrupt and locked files."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading

import pytest
from opentelemetry.trace import StatusCode

from agenttrace import Agent, AgentConfig, FakeClock, Task
from agenttrace import semconv as sc
from agenttrace.errors import MemoryUnavailable
from agenttrace.runtime.memory import SHARED, MemoryStore, fts_query
from agenttrace.runtime.memory_tools import memory_namespace, recall, remember
from agenttrace.testing import ScriptedModel, capture_telemetry, spans_by_name


def test_facts_are_stored_in_the_file_and_ranked_by_bm25(tmp_path):
    path = tmp_path / "run" / "memory.sqlite"
    store = MemoryStore(path)
    store.add_many(["The locker code is 4471.", "The parking spot is B12 on level 2.",
                    "Lunch is at noon in the garden.", "The spare parking card is in the locker."])
    found = store.search("what is my locker code?", limit=2)
    assert [i.text for i in found.items] == ["The locker code is 4471.", "The spare parking card is in the locker."]
    assert found.items[0].score > found.items[1].score > 0  # both words beat one
    assert found.bytes == sum(len(i.text.encode()) for i in found.items) and found.store_s >= 0
    store.close()
    # a real file: another connection (and a new store) reads the same facts
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM memories").fetchone()[0] == 4
    again = MemoryStore(path)
    assert again.search("parking level", limit=1).items[0].text.startswith("The parking spot")


def test_namespaces_keep_runs_apart_and_shared_facts_reach_everyone(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    store.seed(["The office wifi is 'orchard'."])
    assert store.seed(["written twice?"]) == 0  # a seeded namespace is not seeded again
    store.add("Task A parked at B12.", namespace="a")
    store.add("Task B parked at C7.", namespace="b")
    seen_by_a = [i.text for i in store.search("parked wifi", namespaces=(SHARED, "a")).items]
    assert sorted(seen_by_a) == ["Task A parked at B12.", "The office wifi is 'orchard'."]
    assert store.count("b") == 1 and store.count() == 3


def test_free_text_becomes_a_safe_fts_query():
    assert fts_query('what is "the" locker-code? (4471) OR NOT') == '"locker" OR "code" OR "4471" OR "not"'
    assert fts_query("what is the?") is None  # only stopwords: nothing to look for
    assert fts_query('code" NEAR(x') == '"code" OR "near" OR "x"'  # FTS syntax in the text stays words


def test_a_corrupt_file_is_named_and_stays_unavailable(tmp_path):
    path = tmp_path / "memory.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    store = MemoryStore(path)
    with pytest.raises(MemoryUnavailable) as err:
        store.search("anything")
    assert str(path) in str(err.value) and "not a SQLite database" in str(err.value)
    assert store.unavailable is not None
    with pytest.raises(MemoryUnavailable):
        store.add("still refused")
    assert path.read_bytes().startswith(b"this is not a database")  # nothing of the user's file is touched


def test_a_locked_file_times_out_with_a_clear_error_then_works_again(tmp_path):
    path = tmp_path / "memory.sqlite"
    MemoryStore(path).add("before the lock")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    store = MemoryStore(path, busy_timeout_s=0.05)
    with pytest.raises(MemoryUnavailable) as err:
        store.add("during the lock")
    assert "locked" in str(err.value) and str(path) in str(err.value)
    assert store.unavailable is None  # a lock may clear
    holder.execute("ROLLBACK")
    store.add("after the lock")
    assert store.count() == 2


def test_memory_spans_carry_items_bytes_and_the_stores_own_time(tmp_path):
    clock = FakeClock()
    tel, exporter = capture_telemetry(clock)
    store = MemoryStore(tmp_path / "m.sqlite", clock=clock)
    with memory_namespace("run-1"):
        assert remember(store, "The locker code is 4471.", telemetry=tel) is None
        found = recall(store, "locker code", telemetry=tel, auto=True)
    assert [i.namespace for i in found.items] == ["run-1"]
    spans = spans_by_name(exporter.get_finished_spans())
    (create,), (search,) = spans["create_memory"], spans["search_memory"]
    assert create.attributes[sc.SEGMENT] == "memory" and create.attributes[sc.GEN_AI_OPERATION_NAME] == "create_memory"
    assert create.attributes[sc.MEMORY_ITEMS] == 1 and create.attributes[sc.MEMORY_BYTES] == len("The locker code is 4471.")
    assert search.attributes[sc.MEMORY_ITEMS] == 1 and search.attributes[sc.MEMORY_AUTO] is True
    assert search.attributes[sc.MEMORY_STORE] == "sqlite-fts5" and search.attributes[sc.MEMORY_STORE_S] >= 0


RECALL = '{"tool": "recall", "arguments": {"query": "locker code"}}'
REMEMBER = '{"tool": "remember", "arguments": {"text": "The parking spot is B12."}}'


def _agent(tmp_path, replies, *, path=None, **config):
    clock = FakeClock()
    tel, exporter = capture_telemetry(clock)
    store = MemoryStore(path or tmp_path / "memory.sqlite")
    model = ScriptedModel(replies, clock)
    agent = Agent(model, [], telemetry=tel, memory=store, config=AgentConfig(name="mem", **config))
    return agent, store, model, exporter


def test_remember_and_recall_are_tools_whose_spans_nest_in_the_tool_span(tmp_path):
    agent, store, model, exporter = _agent(tmp_path, [REMEMBER, RECALL, '{"answer": "4471"}'])
    store.seed(["The locker code is 4471."])
    result = agent.run(Task(id="t", prompt="Remember my parking spot, then find my locker code."))
    assert result.outcome is sc.TaskOutcome.COMPLETED
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    named = spans_by_name(spans)
    (search,) = named["search_memory"]
    assert by_id[search.parent.span_id].name == "execute_tool recall"
    assert by_id[named["create_memory"][0].parent.span_id].name == "execute_tool remember"
    assert "The locker code is 4471." in model.calls[2][-1].content  # the observation the model saw
    assert store.count("mem") == 1  # the agent's own namespace (memory_scope="agent")


def test_the_runtime_recalls_before_the_first_step_on_its_own(tmp_path):
    agent, store, model, exporter = _agent(tmp_path, ['{"answer": "4471"}'], recall="task_start", memory_scope="task")
    store.seed(["The locker code is 4471.", "Lunch is at noon."])
    agent.run(Task(id="t", prompt="What is my locker code?"))
    prompt = model.calls[0]
    assert prompt[-1].content == "Notes from memory:\n- The locker code is 4471."
    spans = exporter.get_finished_spans()
    named = spans_by_name(spans)
    (search,) = named["search_memory"]
    (agent_span,) = named["invoke_agent mem"]
    assert search.parent.span_id == agent_span.context.span_id  # the task's, before any step
    assert search.end_time <= named["agent_step 1"][0].start_time


def test_a_corrupt_memory_file_is_recorded_and_the_agent_goes_on_without_memory(tmp_path):
    path = tmp_path / "memory.sqlite"
    path.write_bytes(b"\x00garbage" * 64)
    agent, store, model, exporter = _agent(tmp_path, [RECALL, '{"answer": "I do not know."}'], path=path,
                                           recall="task_start")
    result = agent.run(Task(id="t", prompt="What is my locker code?"))
    assert result.outcome is sc.TaskOutcome.COMPLETED  # the task ran to its end
    assert "Memory is unavailable" in model.calls[1][-1].content and str(path) in model.calls[1][-1].content
    spans = exporter.get_finished_spans()
    searches = spans_by_name(spans)["search_memory"]
    assert len(searches) == 2  # the runtime's own and the tool's
    for s in searches:
        assert s.status.status_code is StatusCode.ERROR and s.attributes[sc.ERROR_TYPE] == "memory_unavailable"
        assert str(path) in s.status.description
    (attempt,) = [s for s in spans if s.name == "attempt 1" and s.attributes[sc.ATTEMPT_OUTCOME] == "ok"][:1]
    assert attempt is not None  # the tool call itself held: memory failing is not the model's mistake


# -- many writers on one file ---------------------------------------------------------------------

_WRITER = """
import os, sys, time
from agenttrace.errors import MemoryUnavailable
from agenttrace.runtime.memory import MemoryStore
path, who, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = MemoryStore(path)
while not os.path.exists(path + ".go"):  # all start writing together
    time.sleep(0.001)
refused = []
for i in range(n):
    try:
        store.add(f"writer {who} fact {i}", namespace=f"w{who}")
    except MemoryUnavailable as exc:
        refused.append(exc.reason)
print(len(refused), refused[:1])
"""


def test_concurrent_writer_processes_lose_no_fact(tmp_path):
    # Before: the rollback journal and deferred transactions lost about 6% of 8 x 200 writes
    # ("memory unavailable"), some as "vtable constructor failed".
    path = tmp_path / "memory.sqlite"
    writers, each = 8, 50
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w), str(each)],
                              stdout=subprocess.PIPE, text=True) for w in range(writers)]
    (tmp_path / "memory.sqlite.go").touch()
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [o.split(" ", 1)[0] for o in outputs] == ["0"] * writers, outputs
    store = MemoryStore(path)
    assert store.count() == writers * each
    for w in range(writers):
        assert store.count(f"w{w}") == each


def test_threads_with_a_store_each_lose_no_fact_on_a_new_file(tmp_path):
    # All open the new file at once (the schema is created once, under the write lock), then
    # write through `remember`, the tool's path: no call may answer "unavailable".
    path = tmp_path / "memory.sqlite"
    writers, each = 32, 10
    start = threading.Barrier(writers)
    answers: list[str | None] = []

    def write(who: int) -> None:
        store = MemoryStore(path)
        start.wait()
        with memory_namespace(f"w{who}"):
            answers.extend(remember(store, f"writer {who} fact {i}") for i in range(each))
        store.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a for a in answers if a is not None] == []
    assert MemoryStore(path).count() == writers * each


def test_a_file_opened_by_many_stores_is_in_wal_mode_with_its_schema_once(tmp_path):
    path = tmp_path / "memory.sqlite"
    MemoryStore(path).add("one")
    MemoryStore(path).add("two")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'memories%' "
                                        "AND type != 'table' OR name = 'memories_fts'")]
    assert sorted(names) == ["memories_ad", "memories_ai", "memories_fts", "memories_namespace"]
