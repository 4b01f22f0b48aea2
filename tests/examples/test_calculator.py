"""The calculator evaluates arithmetic by walking the AST; nothing else runs."""

from __future__ import annotations

import time

import pytest
from agenttrace.examples.tools.calculator import calculator, evaluate

from agenttrace import ToolError
from agenttrace.runtime.execution import run_tool


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("17*23", 391),
        ("(45 + 55) * 3", 300),
        ("2**16", 65536),
        ("2^10", 1024),
        ("144 / 12", 12),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-3 + +5", 2),
        ("sqrt(729)", 27),
        ("max(1, 5, 3) + min(2, 4)", 7),
        ("round(pi, 2)", 3.14),
        ("240*0.15", 36),
        ("10 % 4", 2),
    ],
)
def test_arithmetic(expression, value):
    assert evaluate(expression) == pytest.approx(value)


@pytest.mark.parametrize(
    ("expression", "phrase"),
    [
        ("__import__('os').system('echo hi')", "unsupported"),
        ("().__class__", "unsupported"),
        ("open('/etc/passwd')", "unsupported"),
        ("lambda: 1", "unsupported"),
        ("x + 1", "unsupported"),
        ("'a' * 3", "unsupported"),
        ("1 / 0", "division by zero"),
        ("10 ** 10 ** 10", "too large"),
        ("9 ** 999", "too large"),
        ("sqrt(-1)", "cannot evaluate"),
        ("1 +", "cannot parse"),
        ("1" * 600, "longer than"),
    ],
)
def test_anything_but_arithmetic_is_rejected(expression, phrase):
    with pytest.raises(ToolError, match=phrase):
        evaluate(expression)


@pytest.mark.parametrize(
    ("expression", "phrase"),
    [
        ("round(1, -10**8)", "digits is out of range"),  # would build 10**(10**8): minutes of one core
        ("round(1, -10**7)", "digits is out of range"),
        ("9**9**9", "exponent 387420489 is too large"),
        ("10**10**10", "exponent 10000000000 is too large"),
        ("(10**299)**2", "too large"),  # refused from the operands' sizes, before it is computed
        ("9" * 400, "too large"),  # a literal is bounded like a result
    ],
)
def test_costly_operations_are_refused_before_they_run(expression, phrase):
    started = time.perf_counter()
    with pytest.raises(ToolError, match=phrase):
        evaluate(expression)
    assert time.perf_counter() - started < 0.1


def test_the_calculator_runs_in_a_worker_process():
    assert calculator.runs_in == "process"
    assert run_tool(calculator, {"expression": "round(123456, -2)"}) == {"expression": "round(123456, -2)", "result": 123500}
