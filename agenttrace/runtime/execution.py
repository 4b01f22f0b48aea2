"""Running a tool (`core/tools.py` defines them). Where a tool runs is its `isolation`, because only a process can really be stopped:

- "process": in a warm worker process from a small pool. A call that outlives its timeout gets its
  worker killed (SIGKILL) and replaced, so a hung sleep, a busy loop or a regex holding the GIL
  keeps no core, thread or process. Function, arguments, result and exceptions travel by pickle:
  the function must be module-level (or a `functools.partial` of one), it does not see the
  caller's context (spans it opens do not nest) and its side effects stay in the worker.
- "thread": on a thread in a copy of the caller's context (spans the tool opens nest under its
  `execute_tool` span). A timeout returns control, but the thread runs on: Python cannot kill a
  thread, and a GIL-holding tool stalls the caller too; it can see that it was given up on:
  `current_cancel()` (core/chat.py) inside the tool is a token cancelled when its call times out
  (or the task is cancelled), so a long tool that checks `current_cancel().cancelled` between
  pieces of work stops. For tools that need the caller's state and return promptly (I/O with its
  own timeouts).
- "auto" (the default): "process" when the function can be pickled by reference, "thread"
  otherwise (closures and lambdas, which keep their old behaviour).

Before each call, a function headed for a worker is checked against what a worker can import
(`placement.py`): one defined in `python -c` code, in a script read from standard input, or in any
process whose script has no `if __name__ == "__main__":` guard (every worker would run that script
again) runs on a thread instead, and the reason is logged once per tool.

Either way a tool that raises or times out becomes a `ToolFailed` the loop shows the model, and a
result is bounded: a worker sends back at most MAX_TRANSFER_BYTES (beyond that, the rendered text,
capped, with the full size), and `render_tool_result` caps what the model sees.
"""

from __future__ import annotations

import contextvars
import json
import logging
import multiprocessing
import pickle
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from agenttrace.core.chat import CancelToken, current_cancel, task_cancel
from agenttrace.core.tools import MAX_RESULT_CHARS, Tool
from agenttrace.errors import ToolError, ToolFailed

__all__ = ["MAX_RESULT_CHARS", "OversizedResult", "RenderedResult", "render_result", "render_tool_result", "warm_up",
           "run_tool", "shutdown_workers"]

logger = logging.getLogger(__name__)

MAX_TRANSFER_BYTES = 1 << 20  # a pickled result larger than this comes back as capped text
WORKER_START_TIMEOUT_S = 30.0  # a fresh worker imports the tool's module; not the tool's timeout
MAX_IDLE_WORKERS = 4  # warm workers kept between calls; more may run while calls overlap


@dataclass(frozen=True)
class OversizedResult:
    """A result too large to send back whole: the start of its rendered text and the full length."""

    text: str
    chars: int


@dataclass(frozen=True)
class RenderedResult:
    """A result as the model sees it, and the length of the whole rendering (for the span)."""

    text: str
    chars: int  # the whole rendering; more than `text` shows when truncated
    truncated: bool


def run_tool(tool: Tool, arguments: Mapping[str, Any], timeout_s: float | None = None) -> Any:
    """Call the tool with validated arguments where `tool.runs_in` says; return its result.

    Raises ToolFailed (error_type `tool_error`, or `timeout` after `timeout_s`, default the
    tool's own) with a message fit to show the model. A process-isolated call returns within
    about its timeout plus the kill; it may return an OversizedResult for a huge result. In a
    fresh worker the timeout starts once the tool's module is imported.
    """
    timeout = tool.timeout_s if timeout_s is None else timeout_s
    if _in_worker(tool):
        outcome = _POOL.call(tool.function, dict(arguments), timeout)
    else:
        outcome = _call_on_thread(tool.name, tool.function, arguments, timeout)
    if outcome.timed_out:
        raise ToolFailed(tool.name, f"no result within {timeout:g} s", timed_out=True)
    if outcome.error is not None:
        exc = outcome.error
        if isinstance(exc, ToolError):
            raise ToolFailed(tool.name, str(exc)) from exc
        raise ToolFailed(tool.name, f"{outcome.error_name or type(exc).__name__}: {exc}",
                         error_type="tool_error") from exc
    return outcome.value


def _in_worker(tool: Tool) -> bool:
    """Whether this call goes to a worker process: the tool's isolation says so and a worker can
    import its function (else a thread, saying why once per tool)."""
    if tool.runs_in != "process":
        return False
    # Imported here: a process whose tools all run on threads never reads its script's source.
    from agenttrace.runtime.placement import can_run_in_worker

    return can_run_in_worker(tool)


class _CallCancel(CancelToken):
    """`current_cancel()` inside a tool on a thread: cancelled when its call is given up on
    (timed out, interrupted) and whenever the task's own token is."""

    def __init__(self, task: CancelToken | None) -> None:
        super().__init__()
        self.task = task

    @property
    def cancelled(self) -> bool:
        return super().cancelled or (self.task is not None and self.task.cancelled)


@dataclass
class _Outcome:
    value: Any = None
    error: BaseException | None = None
    error_name: str | None = None  # the tool's exception type, when `error` stands in for it
    timed_out: bool = False


def _call_on_thread(name: str, function: Callable[..., Any], arguments: Mapping[str, Any], timeout: float) -> _Outcome:
    outcome = _Outcome()
    ctx = contextvars.copy_context()
    cancel = _CallCancel(current_cancel())

    def call() -> Any:
        with task_cancel(cancel):
            return function(**arguments)

    def work() -> None:
        try:
            outcome.value = ctx.run(call)
        except BaseException as exc:  # reported to the caller, not lost in the thread
            outcome.error = exc

    worker = threading.Thread(target=work, name=f"tool-{name}", daemon=True)
    worker.start()
    try:
        worker.join(timeout)
    except BaseException:  # interrupted: the tool may stop when it next looks
        cancel.cancel()
        raise
    if worker.is_alive():  # abandoned: it runs on until it returns, or until it sees `cancel`
        cancel.cancel()
        return _Outcome(timed_out=True)
    return outcome


# -- worker processes ---------------------------------------------------------------------------

_STARTED = "started"
# A message to a worker: one of these bytes, then the pickled (function, arguments).
_TASK, _WARM_UP = b"T", b"W"  # a warm-up only unpickles (imports the tool's module); no reply


class _RemoteError(Exception):
    """Stands in for a tool's exception that cannot be pickled back from the worker."""


def _worker_main(conn: Connection) -> None:
    """A worker's loop: receive a task, say it started, send ("value", result) or ("error", ...)."""
    while True:
        try:
            task = conn.recv_bytes()
        except (EOFError, OSError):  # the pool closed its end
            return
        try:
            function, arguments = pickle.loads(task[1:])  # imports the tool's module on first use
        except BaseException as exc:
            if task[:1] == _TASK:  # a warm-up that fails says so when the task comes
                conn.send_bytes(_dumps(("error", *_portable(exc))))
            continue
        if task[:1] == _WARM_UP:
            continue
        conn.send_bytes(_dumps((_STARTED,)))
        try:
            reply = _value_reply(function(**arguments))
        except BaseException as exc:
            reply = _dumps(("error", *_portable(exc)))
        conn.send_bytes(reply)


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _value_reply(value: Any) -> bytes:
    """The pickled reply for a result; one over MAX_TRANSFER_BYTES (or one that does not pickle)
    goes as the start of its rendering and its full length."""
    try:
        reply = _dumps(("value", value))
        if len(reply) <= MAX_TRANSFER_BYTES:
            return reply
    except Exception:
        pass
    text = _render_full(value)
    return _dumps(("value", OversizedResult(text=text[:MAX_RESULT_CHARS], chars=len(text))))


def _portable(exc: BaseException) -> tuple[BaseException, str, str]:
    """The exception (or a stand-in if it does not pickle), its type name and its traceback."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
        sendable: BaseException = exc
    except Exception:
        sendable = _RemoteError(str(exc))
    return sendable, type(exc).__name__, text


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection

    def stop(self) -> None:
        """Kill the process (whatever it is doing) and reap it."""
        self.process.kill()
        self.process.join()
        self.conn.close()
        self.process.close()


class _WorkerPool:
    """Warm worker processes, one call at a time each; a worker that times out is killed and
    replaced. No threads: the calling thread waits on the worker's pipe.

    Workers come from the 'forkserver' context: forking a process that has loaded torch or CUDA,
    or runs other threads, is unsafe, and the server preloads agenttrace so a fresh worker costs a
    fork rather than an import.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._context: Any = None

    def _start(self) -> _Worker:
        if self._context is None:
            ctx = multiprocessing.get_context("forkserver")
            # Only takes effect if the fork server is not running yet (it then forks every worker
            # with agenttrace already imported).
            ctx.set_forkserver_preload([__name__])
            self._context = ctx
        parent, child = self._context.Pipe(duplex=True)
        process = self._context.Process(target=_worker_main, args=(child,), name="agenttrace-tool-worker",
                                        daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def _acquire(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                worker.stop()
            return self._start()

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE_WORKERS:
                self._idle.append(worker)
                return
        worker.stop()

    def _replace(self, worker: _Worker, function: Callable[..., Any]) -> None:
        worker.stop()
        with self._lock:
            if len(self._idle) >= MAX_IDLE_WORKERS:
                return
            try:
                fresh = self._start()
            except OSError:  # the next call starts one, and says why if it cannot
                logger.warning("could not start a replacement tool worker", exc_info=True)
                return
            # It imports the tool's module now, while the caller goes on.
            fresh.conn.send_bytes(_WARM_UP + _dumps((function, None)))
            self._idle.append(fresh)

    def call(self, function: Callable[..., Any], arguments: dict[str, Any], timeout: float) -> _Outcome:
        task = _TASK + _dumps((function, arguments))
        worker = self._acquire()
        try:
            worker.conn.send_bytes(task)
            if not worker.conn.poll(WORKER_START_TIMEOUT_S):
                self._replace(worker, function)
                return _Outcome(error=ToolError(f"its worker did not start within {WORKER_START_TIMEOUT_S:g} s"))
            reply = worker.conn.recv_bytes()
            if pickle.loads(reply)[0] == _STARTED:
                if not worker.conn.poll(timeout):
                    self._replace(worker, function)
                    return _Outcome(timed_out=True)
                reply = worker.conn.recv_bytes()
        except (EOFError, OSError):  # the worker died: os._exit, a signal, out of memory
            worker.process.join(1)
            code = worker.process.exitcode
            self._replace(worker, function)
            return _Outcome(error=_RemoteError(f"its worker process exited (code {code})"), error_name="WorkerDied")
        except BaseException:  # interrupted while it runs: do not leave it running
            self._replace(worker, function)
            raise
        self._release(worker)
        try:
            kind, *rest = pickle.loads(reply)
        except Exception as exc:  # e.g. the result's class cannot be imported here
            return _Outcome(error=exc)
        if kind == "value":
            return _Outcome(value=rest[0])
        exc, name, remote_traceback = rest
        exc.add_note(f"raised in the tool's worker process:\n{remote_traceback}")
        return _Outcome(error=exc, error_name=name)

    def warm(self, functions: list[Callable[..., Any]]) -> None:
        """Have an idle worker ready that has imported each function's module."""
        with self._lock:
            if not self._idle:
                self._idle.append(self._start())
            worker = self._idle[-1]
        for function in functions:
            worker.conn.send_bytes(_WARM_UP + _dumps((function, None)))

    def shutdown(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()


_POOL = _WorkerPool()


def warm_up(tools: Iterable[Tool]) -> None:
    """Start a worker for the process-isolated `tools` now: the fork server's start and the
    tools' imports (a second or two the first time) then happen here, at set-up, and not inside
    the first tool call's span. Nothing happens for tools that run on threads."""
    functions = [t.function for t in tools if _in_worker(t)]
    if functions:
        try:
            _POOL.warm(functions)
        except OSError:  # the first call starts one, and says why if it cannot
            logger.warning("could not start a tool worker ahead of time", exc_info=True)


def shutdown_workers() -> None:
    """Stop the idle worker processes (they also stop when this process exits). Safe to call
    at any time; the next process-isolated call starts a fresh worker."""
    _POOL.shutdown()


# -- rendering ------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, (set, frozenset)) else str(value)


def _render_full(value: Any) -> str:
    try:
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=_jsonable)
    except (TypeError, ValueError):
        return repr(value)


def render_tool_result(value: Any, limit: int = MAX_RESULT_CHARS) -> RenderedResult:
    """A tool result as the text the model sees (JSON when possible, capped at `limit` chars with
    a marker saying how much was cut) and the length of the whole rendering."""
    if isinstance(value, OversizedResult):
        text, chars = value.text, value.chars
    else:
        text = _render_full(value)
        chars = len(text)
    truncated = chars > limit
    if truncated:
        text = text[:limit] + f"... [{chars - limit} more characters]"
    return RenderedResult(text=text, chars=chars, truncated=truncated)


def render_result(value: Any, limit: int = MAX_RESULT_CHARS) -> str:
    """`render_tool_result(value, limit).text`."""
    return render_tool_result(value, limit).text

