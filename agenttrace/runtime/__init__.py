"""The reference agent runtime: the loop that turns a task into steps, attempts and decisions.

    prompt.py    messages for the model: system prompt, tool schemas, worked examples, feedback
    parse.py     the model's reply -> a tool call or a final answer (or a ParseError saying why)
    validate.py  a tool call's arguments against the tool's JSON schema
    tools.py     `Tool`: a function with a JSON-schema argument list, run with a timeout
    tasks.py     task sets (JSON lines) and whether a decision matches a task's expected call
    agent.py     `Agent`: the loop, traced through the public instrumentation API
"""
