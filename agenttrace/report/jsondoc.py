"""A report document written out as JSON, whatever strings the trace gave it, one list item at a
time where the document is large."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json

# A lone UTF-16 surrogate is valid JSON and a valid Python str, but no UTF-8: the readers' table.
from agenttrace.traces.jsontext import no_surrogates

__all__ = ["JsonDocument", "dump_json"]


def dump_json(model: BaseModel, indent: int | None = None, **kwargs) -> str:
    """`model.model_dump_json`, but a lone UTF-16 surrogate from a trace (valid JSON, `"\\ud800"`,
    that no UTF-8 can encode) is written as U+FFFD instead of failing the whole document. Models
    without one take pydantic's own path, byte for byte."""
    try:
        return BaseModel.model_dump_json(model, indent=indent, **kwargs)
    except PydanticSerializationError:
        def clean(v):
            if isinstance(v, str):
                return no_surrogates(v)
            if isinstance(v, dict):
                return {clean(k): clean(x) for k, x in v.items()}
            return [clean(x) for x in v] if isinstance(v, list) else v

        # inf and nan as null, as pydantic's own path writes them
        return to_json(clean(model.model_dump(mode="json", **kwargs)), indent=indent, inf_nan_mode="null").decode()


class JsonDocument(BaseModel):
    """A model written out as JSON (`--format json`).

    `STREAMED` names a top-level list field that can be large (a report's tasks): `iter_json`
    writes it one item at a time, so writing a document costs the size of one item, not a second
    copy of the whole document (a 25k-task report's JSON is ~200 MB of text)."""

    STREAMED: ClassVar[str | None] = None

    def model_dump_json(self, **kwargs) -> str:
        return dump_json(self, **kwargs)

    def iter_json(self, indent: int = 2) -> Iterator[str]:
        """The text of `model_dump_json(indent=indent)`, byte for byte, in pieces."""
        field = self.STREAMED
        items = getattr(self, field) if field else None
        if not items:
            yield dump_json(self, indent=indent)
            return
        head = dump_json(self.model_copy(update={field: []}), indent=indent)
        # With an indent every top-level key starts a line indented once; strings cannot hold a raw
        # newline, so this marker is the field itself and nothing inside a value.
        pad = " " * indent
        marker = f'\n{pad}"{field}": []'
        at = head.index(marker)
        yield head[:at] + f'\n{pad}"{field}": ['
        inner = "\n" + pad * 2
        for i, item in enumerate(items):
            text = dump_json(item, indent=indent)
            yield ("," if i else "") + inner + text.replace("\n", inner)
        yield f"\n{pad}]" + head[at + len(marker):]
