"""Profiling an agent that has no tracing code: `agenttrace run -- python my_agent.py` for a
program, `agenttrace.profile()` for a block of code. Both turn on the installed
instrumentations (their entry points; nothing patched by us), write our trace file and print
its report when the program or block ends, however it ends.

    bootstrap/sitecustomize.py  the child side: provider, exporters, instrumentations (stdlib + OTel only)
    receiver.py                 the parent's loopback OTLP/HTTP receiver; OTLP protobuf -> our JSON lines
    program.py                  runs the command with the bootstrap on its PYTHONPATH; signals; exit status
    inprocess.py                profile(): the same in the running process
    show.py                     the report printed at the end
"""

from agenttrace.profiling.inprocess import Profile, profile

__all__ = ["Profile", "profile"]
