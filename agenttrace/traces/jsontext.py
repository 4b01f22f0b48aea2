"""JSON text into Python values the readers can trust: one document per call, anything that is
not JSON (or nested deeper than the parser goes, or a number too long to read) a `JSONError`
with a one-line reason, and lone UTF-16 surrogates (`"\\ud800"`, valid JSON that no encoder can
write back) replaced by U+FFFD. Every trace reader parses through here. No torch import.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agenttrace.errors import JSONError

__all__ = ["SURROGATES", "no_surrogates", "parse_json"]


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Each lone surrogate becomes U+FFFD, as Go's and Rust's JSON encoders write invalid text: the one
# table the readers, the Jaeger export and the report's writers share.
SURROGATES = {c: "\ufffd" for c in range(0xD800, 0xE000)}


def no_surrogates(text: object) -> str:
    """`text` as a str that encodes to UTF-8: each lone surrogate replaced by U+FFFD."""
    s = str(text)
    return s if s.isascii() else s.translate(SURROGATES)


def parse_json(text: str | bytes) -> Any:
    """One JSON document, with text that no encoder can write back (a lone UTF-16 surrogate,
    which JSON's `\\ud800` escape can express) replaced by U+FFFD: everything downstream may then
    treat text as text. Raises JSONError for anything that is not JSON, nested deeper than the
    JSON parser goes, or a number too long to read."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JSONError(f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    except RecursionError as exc:
        raise JSONError("not readable JSON (nested deeper than the JSON parser allows)") from exc
    except ValueError as exc:  # an integer of over 4300 digits
        raise JSONError(f"not readable JSON ({exc})") from exc
    if "\\u" not in text or not _SURROGATE_ESCAPE.search(text):
        return doc  # the common case: one substring search, no walk
    return _without_surrogates(doc)


def _without_surrogates(doc: Any) -> Any:
    """`doc` with lone surrogates replaced in every string (keys too); iterative, for depth."""
    fix = no_surrogates
    if isinstance(doc, str):
        return fix(doc)
    if not isinstance(doc, (dict, list)):
        return doc
    root = doc
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, str):
                    node[i] = fix(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        else:
            for k in [k for k in node if _SURROGATE.search(k)]:
                node[fix(k)] = node.pop(k)
            for k, v in node.items():
                if isinstance(v, str):
                    node[k] = fix(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
    return root
