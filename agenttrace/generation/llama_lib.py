"""llama.cpp's library as `llama-cpp-py-sync` ships it (prebuilt, no compile step): its CFFI
declarations and `libllama`, opened once per process.

The wheels are built on a glibc of 2.38 or later (tagged manylinux2014 all the same): their
libraries import the C23 forms `__isoc23_strtol`, `strtoul`, `strtoull` and `sscanf`, which older
glibcs (Debian 12 has 2.36) do not define, so the loader refuses them. They differ from the C99
functions only in reading a `0b` prefix, which llama.cpp never parses. On such a glibc this module
opens a private copy (in agenttrace's cache, made once per library version) whose imports name
the C99 functions: each import's name is pointed at the suffix of its own string (`strtol` inside
`__isoc23_strtol`) and the version it needs is GLIBC_2.2.5's. Nothing else in the files changes.
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
from pathlib import Path
from typing import Any

from agenttrace.errors import ModelUnavailable

INSTALL_HINT = "pip install 'agenttrace[llamacpp]' (the prebuilt llama-cpp-py-sync wheel)"
_C23 = b"__isoc23_"
_NEW, _OLD = b"GLIBC_2.2.5", b"GLIBC_2.38"
_SHT_DYNSYM, _SHT_VERNEED = 11, 0x6FFFFFFE
_lock = threading.Lock()
_opened: tuple[Any, Any] | None = None


def open_library() -> tuple[Any, Any]:
    """(ffi, lib) of llama.cpp, opened once. ModelUnavailable saying what to install when the
    package is missing, or why its library does not load."""
    global _opened
    with _lock:
        if _opened is None:
            try:
                from llama_cpp_py_sync import _cffi_bindings as bindings
            except ImportError as exc:
                raise ModelUnavailable(f"the llama.cpp backend needs llama-cpp-py-sync: {INSTALL_HINT}") from exc
            folder = Path(bindings.__file__).parent
            try:
                lib = bindings.ffi.dlopen(str(folder / "libllama.so"))
            except OSError as exc:
                if "GLIBC_2.38" not in str(exc):
                    raise ModelUnavailable(f"llama.cpp's library does not load here: {exc}") from exc
                try:
                    copy = _c99_copy(folder)
                except OSError as err:
                    raise ModelUnavailable(f"llama.cpp's library needs a copy for this glibc and it could not be "
                                           f"written ({err}): set AGENTTRACE_CACHE_DIR to a writable folder") from err
                lib = bindings.ffi.dlopen(str(copy))
            lib.llama_backend_init()
            _opened = (bindings.ffi, lib)
        return _opened


def _c99_copy(folder: Path) -> Path:
    """A copy of the package's libraries that loads on a glibc older than 2.38 (module docstring),
    made once per installed version in agenttrace's cache; its libllama.so."""
    from agenttrace.generation.cache import cache_dir

    stamp = f"{folder.stat().st_mtime_ns}-{(folder / 'libllama.so').stat().st_size}"
    target = cache_dir() / "llama-cpp-c99" / stamp
    if not (target / "libllama.so").is_file():
        tmp = target.with_name(f"{stamp}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for f in folder.iterdir():
            if f.is_file() and ".so" in f.name:
                data = bytearray(f.read_bytes())
                c99_imports(data)
                (tmp / f.name).write_bytes(data)
        try:
            tmp.rename(target)  # whole or not at all; another process may have made it first
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return target / "libllama.so"


def _sections(data: bytearray) -> list[tuple[int, ...]]:
    """An ELF64 little-endian file's section headers (type, offset, size, link, info, entsize)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    entsize, count = struct.unpack_from("<HH", data, 0x3A)
    out = []
    for i in range(count):
        _, kind, _, _, offset, size, link, info, _, ent = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize)
        out.append((kind, offset, size, link, info, ent))
    return out


def _text(data: bytearray, secs: list[tuple[int, ...]], table: int, offset: int) -> bytes:
    start = secs[table][1] + offset
    return bytes(data[start : data.index(b"\0", start)])


def version_needs(data: bytearray) -> list[list[tuple[int, int, int, bytes]]]:
    """A library's version requirements: per library it needs (Elf64_Verneed), its versions
    (Elf64_Vernaux) as (offset of the entry, hash, name's offset, name)."""
    secs = _sections(data)
    out = []
    for kind, offset, _, link, info, _ in secs:
        if kind != _SHT_VERNEED:
            continue
        need = offset
        for _ in range(info):
            _, count, _, aux, following = struct.unpack_from("<HHIII", data, need)
            entries, at = [], need + aux
            for _ in range(count):
                hash_, _, _, name, step = struct.unpack_from("<IHHII", data, at)
                entries.append((at, hash_, name, _text(data, secs, link, name)))
                at += step
            out.append(entries)
            need += following
    return out


def c99_imports(data: bytearray) -> int:
    """Rewrite one shared library in place so that its C23 imports name the C99 functions and
    need GLIBC_2.2.5 instead of GLIBC_2.38 (module docstring). Returns how many entries changed;
    0 for a file that has none."""
    secs = _sections(data)
    changed = 0
    for kind, offset, size, link, _, ent in secs:
        if kind == _SHT_DYNSYM:  # Elf64_Sym: st_name is its first word
            for at in range(offset, offset + size, ent or 24):
                (name,) = struct.unpack_from("<I", data, at)
                if _text(data, secs, link, name).startswith(_C23):
                    struct.pack_into("<I", data, at, name + len(_C23))
                    changed += 1
    for entries in version_needs(data):
        donor = next(((h, n) for _, h, n, text in entries if text == _NEW), None)
        for at, _, _, text in entries:
            if donor is not None and text == _OLD:
                struct.pack_into("<I", data, at, donor[0])
                struct.pack_into("<I", data, at + 8, donor[1])
                changed += 1
    return changed


_LOG_CALLBACK = None


def quiet_logs(ffi, lib) -> None:
    """Drop llama.cpp's log lines (a model load writes hundreds to stderr, the quantizer one per
    tensor). The callback stays alive for the process, as llama.cpp holds it."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is None:
        _LOG_CALLBACK = ffi.callback("void(enum ggml_log_level, const char *, void *)", lambda level, text, data: None)
    lib.llama_log_set(_LOG_CALLBACK, ffi.NULL)
