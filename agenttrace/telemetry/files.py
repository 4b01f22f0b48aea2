"""Files written whole: a full or read-only disk leaves whole lines, or the old file, never a torn one.

`LineFile` appends lines to a file that other programs read line by line (the trace file): each
append is all of its line or none of it. A write the disk refuses part-way is cut back off, so
the next line, written once space comes back, starts on a line of its own and every line still
parses. `write_whole` replaces an output file (a report, Jaeger JSON) with a temporary file
beside it renamed over it, so a failed write leaves what was there before. Both raise the
`OSError`; what to say is the caller's (`unwritten` gives the one line).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["IncompleteWrite", "LineFile", "reason", "unwritten", "write_output", "write_whole"]


class IncompleteWrite(OSError):
    """A write in place (to a device, a pipe) failed: part of the output may be there."""


def reason(exc: BaseException) -> str:
    """What went wrong, in the system's words when it has them: `No space left on device`."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def unwritten(path: str | os.PathLike[str], exc: OSError) -> str:
    """The one line for an output `write_whole` could not write: `could not write X: No space
    left on device; nothing was written` (or, written in place, that it may be incomplete)."""
    after = "the output there may be incomplete" if isinstance(exc, IncompleteWrite) else "nothing was written"
    return f"could not write {os.fspath(path)}: {reason(exc)}; {after}"


def _write_all(fd: int, data: bytes) -> int:
    """Write every byte of `data` (a full disk first writes part, then refuses); the count
    written so far rides on the raised OSError as `written`."""
    view = memoryview(data)
    done = 0
    while done < len(data):
        try:
            n = os.write(fd, view[done:])
        except OSError as exc:
            exc.written = done  # type: ignore[attr-defined]
            raise
        if n == 0:  # no progress and no error: treat as a full disk rather than spin
            exc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            exc.written = done  # type: ignore[attr-defined]
            raise exc
        done += n
    return done


def _ends_mid_line(fd: int) -> bool:
    """Whether the file's last byte is not a newline (an empty file: no). A file opened write-only
    cannot be read: then yes, and a torn line costs at most one empty line."""
    try:
        size = os.fstat(fd).st_size
        return size > 0 and os.pread(fd, 1, size - 1) != b"\n"
    except OSError:
        return True


class LineFile:
    """Appends whole lines to `path` (its folder created on first open); thread-safe.

    `append` writes all of its bytes or, when the disk refuses part-way, cuts the part written
    back off before raising, so no torn line is ever followed by another. If the cut is not
    possible (another process appended meanwhile, or the truncate itself failed), the next
    append starts with a newline instead: the torn line stays one unreadable line, and the next
    ones are whole. A file left ending mid-line by an earlier crash is handled the same way.
    The file is opened lazily and again after a failed open, so a folder that becomes writable
    later is written from then on.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._torn = False  # the file ends mid-line: the next append starts a new line first
        self._lock = threading.Lock()

    def open(self) -> None:
        """Open (creating the folder and the file) if not open yet; raises the OSError."""
        with self._lock:
            self._open()

    def _open(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:  # read access only to see whether an earlier writer left the last line torn
            fd = os.open(self.path, flags | os.O_RDWR, 0o666)
        except PermissionError:
            fd = os.open(self.path, flags | os.O_WRONLY, 0o666)
        self._fd = fd
        self._torn = _ends_mid_line(fd)

    def append(self, line: bytes) -> None:
        """Append `line` (one or more lines, ending in a newline) whole, or raise the OSError
        with nothing of it left in the file."""
        with self._lock:
            self._open()
            assert self._fd is not None
            fd = self._fd
            if self._torn:  # look again: another writer may have ended the line since
                self._torn = _ends_mid_line(fd)
            data = b"\n" + line if self._torn else line
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                _write_all(fd, data)
            except OSError as exc:
                self._cut_back(fd, start, getattr(exc, "written", 0))
                raise
            self._torn = False

    def _cut_back(self, fd: int, start: int, written: int) -> None:
        """Remove the `written` bytes a refused append left at `start`, if they are still the end."""
        if written == 0:
            return
        try:
            # Only our bytes may go: with O_APPEND another process's line may follow them, and
            # truncating would cut that. (A writer slipping in between fstat and ftruncate is
            # not guarded against; agenttrace writes a trace file from one process.)
            if os.fstat(fd).st_size == start + written:
                os.ftruncate(fd, start)  # shrinking needs no free space
                return
        except OSError:
            pass
        self._torn = True

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)


def write_whole(path: str | os.PathLike[str], data: str | bytes | Iterable[str]) -> None:
    """Write `data` (or its pieces, in order: a large document need not be one string) to `path`
    all or nothing, or raise the OSError.

    A regular file (or a new one) is written to a temporary file in the same folder, then
    renamed over it: a full or read-only disk leaves the old file (or none) and the OSError is
    raised, with nothing left behind. The new file gets the old one's mode (a new one: 0o666
    less the umask); a symlink keeps pointing where it did and its target is replaced. Anything
    else (a device such as /dev/stdout or /dev/full, a pipe) cannot be replaced, so it is
    written in place, and a failed write raises `IncompleteWrite`: part of `data` may be
    there. Folders are not created.
    """
    pieces = _pieces(data)
    try:
        mode = os.stat(path).st_mode  # through symlinks: /dev/stdout is the pipe or terminal
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        _write_in_place(Path(path), pieces)
        return
    target = Path(os.path.realpath(path))
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except PermissionError:
        if mode is not None and os.access(target, os.W_OK):
            # a writable file in a folder we may not create in: in place is the only way
            _write_in_place(target, pieces)
            return
        raise
    try:
        try:
            for raw in pieces:
                _write_all(fd, raw)
            if mode is not None:
                os.fchmod(fd, stat.S_IMODE(mode))
            os.fsync(fd)  # a filesystem that reports the full disk only at sync says it here
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def write_output(text: str | Iterable[str], output: str | None, command: str | None = "report") -> int:
    """A command's output: `text` (or its pieces, in order) written to the file `output` whole
    (a full or read-only disk leaves the old file, and one line on stderr says so), or to stdout,
    ending in a newline. The exit status: 0, or 1 when the file could not be written."""
    if isinstance(text, str):
        text = (text,)
    if not output:
        last = ""
        for last in text:
            sys.stdout.write(last)
        if not last.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
        return 0
    try:
        write_whole(output, text)
    except OSError as exc:
        print(f"agenttrace{' ' + command if command else ''}: {unwritten(output, exc)}", file=sys.stderr)
        return 1
    print(f"wrote {output}", file=sys.stderr)
    return 0


def _pieces(data: str | bytes | Iterable[str]) -> Iterator[bytes]:
    if isinstance(data, (str, bytes)):
        data = (data,)
    for piece in data:
        yield piece.encode("utf-8") if isinstance(piece, str) else piece


def _write_in_place(target: Path, pieces: Iterator[bytes]) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0))
    done = 0
    try:
        for raw in pieces:
            done += _write_all(fd, raw)
    except OSError as exc:
        exc.written = done + getattr(exc, "written", 0)  # type: ignore[attr-defined]
        # a device that took no byte (/dev/full) holds nothing of ours; a file cut by O_TRUNC,
        # or anything that took part, holds part
        if getattr(exc, "written", 0) or stat.S_ISREG(os.fstat(fd).st_mode):
            raise IncompleteWrite(exc.errno, exc.strerror, str(target)) from exc
        raise
    finally:
        os.close(fd)
