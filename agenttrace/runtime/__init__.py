"""The reference agent runtime: the loop that turns a task into steps, attempts and decisions.

    prompt.py    messages for the model: system prompt, tool schemas, worked examples, feedback
    parse.py     the model's reply -> a tool call or a final answer (or a ParseError saying why)
    execution.py a `Tool` (core/tools.py) run where its isolation says, with a timeout, its result capped
    placement.py whether a worker process can import a tool's function (else it runs on a thread)
    decision_grammar.py  the grammar of a decision (a tool call or an answer) for constrained decoding
    tasks.py     task sets (JSON lines) and whether a decision matches a task's expected call
    memory.py, memory_tools.py   the memory store and its tools (only with a MemoryStore)
    compaction.py  keeps prompts under the token budget; delegation.py  sub-agents as tools
    results.py   what a task run gave: TaskResult, StepRecord, AttemptRecord
    agent.py     `Agent`: the loop, traced through the public instrumentation API
"""
