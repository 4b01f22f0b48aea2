"""A GGUF model's embedding and output tables as float32 arrays, for what reads them outside
llama.cpp: the trained draft heads (EAGLE embeds the drafted tokens with the target's table and
both heads score with its output table), fingerprinted against the model they were trained on.

gguf's reader parses the whole file's metadata in Python (about 10 s for the bundled model, its
vocabulary most of it) and dequantizes the table (1.5 s), so the arrays are written once into the
cache, keyed by the file's name, size and mtime, and mapped from there after.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from agenttrace.errors import ModelUnavailable

__all__ = ["TABLES", "tables"]

TABLES = {"embedding": "token_embd.weight", "output": "output.weight"}  # our name: the GGUF tensor's


def tables(gguf: Path, cache: Path) -> dict[str, np.ndarray]:
    """{"embedding": [vocab, d], and "output": [vocab, d] when the file has its own (else the
    model ties it to the embedding)}, float32, copy-on-write maps of the cache's copies (nothing
    read into memory until used; writable, so torch takes them as they are)."""
    st = gguf.stat()
    folder = cache / "tables" / f"{gguf.stem}-{st.st_size}-{st.st_mtime_ns}"
    if not (folder / "embedding.npy").is_file():
        _write(gguf, folder)
    return {name: np.load(folder / f"{name}.npy", mmap_mode="c") for name in TABLES if (folder / f"{name}.npy").is_file()}


def _write(gguf: Path, folder: Path) -> None:
    """Dequantize the file's tables into `folder` (each array written under a temporary name and
    renamed, the embedding last: its presence says the folder is whole)."""
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize
    except ImportError as exc:
        raise ModelUnavailable("reading a GGUF's tables needs the gguf package: pip install gguf") from exc
    found = {t.name: t for t in GGUFReader(str(gguf)).tensors}
    if TABLES["embedding"] not in found:
        raise ModelUnavailable(f"{gguf.name} has no {TABLES['embedding']} tensor: no table for a draft head to read")
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(TABLES, key=lambda n: n == "embedding"):  # the embedding last
        tensor = found.get(TABLES[name])
        if tensor is None:
            continue
        table = np.ascontiguousarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        tmp = folder / f".{name}.{os.getpid()}.npy"
        np.save(tmp, table)
        tmp.replace(folder / f"{name}.npy")
