"""Arithmetic without `eval`: the expression is parsed to an AST and only numbers, arithmetic
operators and a few math functions are evaluated; anything else is rejected.

Every value stays within MAX_MAGNITUDE, and an operation whose cost grows with its operands (a
power, `round` to a negative number of digits, which computes 10**digits) is checked before it
runs, so no expression under MAX_EXPRESSION_CHARS keeps a core busy. The tool also runs in a worker
process that its timeout kills, in case a bound here is missed.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from agenttrace import Tool, ToolError

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000  # 10**10**10 would take the process down before any timeout could fire
MAX_MAGNITUDE = 1e300
MAX_RESULT_BITS = 1000  # an integer power beyond this (2**1000 is about 1e301) is refused unevaluated
MAX_ROUND_DIGITS = 400  # round(1, -10**8) builds 10**(10**8); past 1e300 no digit changes anyway

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def _bounded(value: Any) -> Any:
    if isinstance(value, complex):
        raise ToolError("the result is not a real number")
    if isinstance(value, (int, float)) and abs(value) > MAX_MAGNITUDE:
        raise ToolError(f"the result is too large (limit {MAX_MAGNITUDE:g})")
    return value


def _check_power(base: int | float, exponent: int | float) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent {exponent} is too large (limit {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if (abs(base).bit_length() - 1) * exponent > MAX_RESULT_BITS:
            raise ToolError(f"the result is too large (limit {MAX_MAGNITUDE:g})")


def _check_round(args: list[Any]) -> None:
    if len(args) == 2 and isinstance(args[1], int) and abs(args[1]) > MAX_ROUND_DIGITS:
        raise ToolError(f"round to {args[1]} digits is out of range (limit {MAX_ROUND_DIGITS})")


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _bounded(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _bounded(_BINARY[type(node.op)](left, right))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_eval(a) for a in node.args]
        if node.func.id == "round":
            _check_round(args)
        return _bounded(_FUNCTIONS[node.func.id](*args))
    raise ToolError(f"unsupported element {ast.unparse(node)!r}: use numbers, + - * / // % **, parentheses, "
                    f"and {', '.join(sorted(_FUNCTIONS))}")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; ToolError says what is wrong with a bad one."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    # People (and models) write x for times and ^ for power.
    text = expression.replace("^", "**").replace("×", "*").replace("÷", "/")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"cannot parse {expression!r}: {exc.msg}") from None
    try:
        value = _eval(tree)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise ToolError(f"cannot evaluate {expression!r}: {exc}") from None
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return round(value, 10) if isinstance(value, float) else value


def calculate(expression: str) -> dict[str, Any]:
    return {"expression": expression, "result": evaluate(expression)}


calculator = Tool(
    name="calculator",
    description="Evaluate an arithmetic expression.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "maxLength": MAX_EXPRESSION_CHARS}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    function=calculate,
    timeout_s=2.0,
)
