"""A report document written out whole as JSON, whatever strings the trace gave it."""

from __future__ import annotations

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json

# A lone UTF-16 surrogate is valid JSON and a valid Python str, but no UTF-8: the readers' table.
from agenttrace.traces.jsontext import no_surrogates

__all__ = ["JsonDocument"]



class JsonDocument(BaseModel):
    """A model written out whole as JSON (`--format json`)."""

    def model_dump_json(self, **kwargs) -> str:
        """As pydantic's, but a lone UTF-16 surrogate from a trace (valid JSON, `"\\ud800"`, that no
        UTF-8 can encode) is written as U+FFFD instead of failing the whole document. Documents
        without one take pydantic's own path, byte for byte."""
        try:
            return super().model_dump_json(**kwargs)
        except PydanticSerializationError:
            def clean(v):
                if isinstance(v, str):
                    return no_surrogates(v)
                if isinstance(v, dict):
                    return {clean(k): clean(x) for k, x in v.items()}
                return [clean(x) for x in v] if isinstance(v, list) else v

            indent = kwargs.pop("indent", None)
            # inf and nan as null, as pydantic's own path writes them
            return to_json(clean(self.model_dump(mode="json", **kwargs)), indent=indent, inf_nan_mode="null").decode()
