"""Read a whole document: the long observations that fill an agent's context (the long-horizon
suite's reports, logs and notes under `data/documents/`)."""

from __future__ import annotations

from pathlib import Path

from agenttrace import Tool, ToolError

DOCUMENTS = Path(__file__).parent / "data" / "documents"
RESULT_CHARS = 20_000  # a document is shown whole: that is what makes the context grow


def document_names(folder: Path = DOCUMENTS) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.txt"))


def make_document_reader(folder: Path = DOCUMENTS) -> Tool:
    """`read_document(name)`: the text of `folder/name.txt`, one of the names it lists."""
    names = document_names(folder)

    def read_document(name: str) -> str:
        path = folder / f"{name}.txt"
        if name not in names or not path.is_file():
            raise ToolError(f"no document {name!r}; the documents are {', '.join(names)}")
        return path.read_text(encoding="utf-8")

    return Tool(
        "read_document",
        "Read a document in full by its name.",
        {"type": "object", "properties": {"name": {"type": "string", "enum": names}}, "required": ["name"],
         "additionalProperties": False},
        read_document,
        result_chars=RESULT_CHARS,
    )
