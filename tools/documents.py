"""Read whole documents: the long observations that fill an agent's context (the long-horizon
suite's reports, logs and notes under `data/documents/`)."""

from __future__ import annotations

from pathlib import Path

from agenttrace import Tool, ToolError

DOCUMENTS = Path(__file__).parent / "data" / "documents"
MAX_DOCUMENTS = 2  # per call: two of the suite's documents nearly fill the bundled model's context
RESULT_CHARS = 40_000  # the documents are shown whole: that is what makes the context grow


def document_names(folder: Path = DOCUMENTS) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.txt"))


def make_document_reader(folder: Path = DOCUMENTS) -> Tool:
    """`read_documents(names)`: the text of `folder/<name>.txt` for each name (one or two of the
    names it lists), each under a heading with its name."""
    names = document_names(folder)

    def read_documents(names: list[str]) -> str:
        parts = []
        for name in names:
            path = folder / f"{name}.txt"
            if not path.is_file():
                raise ToolError(f"no document {name!r}; the documents are {', '.join(document_names(folder))}")
            parts.append(f"=== {name} ===\n{path.read_text(encoding='utf-8')}")
        return "\n".join(parts)

    return Tool(
        "read_documents",
        "Read one or two documents in full by their names.",
        {"type": "object",
         "properties": {"names": {"type": "array", "items": {"type": "string", "enum": names}, "minItems": 1,
                                  "maxItems": MAX_DOCUMENTS}},
         "required": ["names"], "additionalProperties": False},
        read_documents,
        result_chars=RESULT_CHARS,
    )
