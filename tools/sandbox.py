"""Walking a folder tree under a sandbox root through directory handles, so nothing outside it is read.

A path checked first and opened later can be swapped for a symbolic link in between, so no path is
ever checked: every folder and file is opened relative to its parent's open file descriptor, one
name at a time, with O_NOFOLLOW. A link is never followed whatever it points at (it is counted as
skipped), and a folder renamed or replaced mid-walk is either the one already open or is refused
at open time. `..` in the folder asked for is resolved on its components, never by the system.

The walk is bounded in depth (which also bounds the descriptors held open), in names looked at, in
files read and in time, and stops when its cancel token is set; the stats say what was cut.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

from agenttrace import ToolError
from agenttrace.clock import Clock, default_clock
from agenttrace.core.chat import CancelToken

__all__ = ["DEFAULT_LIMITS", "SandboxFile", "SandboxLimits", "WalkStats", "supported", "walk"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the listing must not block the open (fstat then refuses it).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_SHOWN_PATH_CHARS = 80  # of a path quoted in an error: the model may send a very long one


@dataclass(frozen=True)
class SandboxLimits:
    """What one walk may cost; each limit reached is said in the stats, never an error."""

    max_depth: int = 32  # folders below the root; also the most descriptors one walk holds open
    max_files: int = 10_000  # files opened and read
    max_entries: int = 100_000  # names listed, files and folders (a folder of millions of names)
    max_file_bytes: int = 1_000_000  # larger files are skipped: a notes search, not grep over logs
    time_budget_s: float = 4.0  # under the tool's timeout, so the model gets what was found


DEFAULT_LIMITS = SandboxLimits()


@dataclass
class WalkStats:
    """What one walk read, skipped and cut."""

    files_read: int = 0
    entries: int = 0
    symlinks_skipped: int = 0  # links are never followed, whatever they point at
    too_deep: int = 0  # folders below max_depth, not entered
    too_large: int = 0  # files over max_file_bytes, not read
    unreadable: int = 0  # files or folders the system refused (permissions, I/O errors)
    stopped: str | None = None  # why the walk ended before the tree did, when it did

    def cut(self) -> bool:
        """Whether part of the tree was not searched because of a limit or a cancel."""
        return self.stopped is not None or self.too_deep > 0

    def note(self, limits: SandboxLimits) -> str | None:
        """One line for the model saying what was not searched, or None when nothing was skipped."""
        parts = [self.stopped] if self.stopped else []
        if self.too_deep:
            parts.append(f"{_count(self.too_deep, 'folder')} deeper than {limits.max_depth} levels not searched")
        if self.symlinks_skipped:
            parts.append(f"{_count(self.symlinks_skipped, 'symbolic link')} not followed")
        if self.too_large:
            parts.append(f"{_count(self.too_large, 'file')} over {limits.max_file_bytes:,} bytes not read")
        if self.unreadable:
            parts.append(f"{_count(self.unreadable, 'file or folder', 'files or folders')} could not be read")
        return "; ".join(parts) or None


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"1 {one}" if n == 1 else f"{n:,} {many or one + 's'}"


@dataclass
class SandboxFile:
    """A regular file met by the walk. `read` is valid only until the walk moves on (it opens the
    file relative to its folder's descriptor, which the walk then closes)."""

    path: str  # relative to the root, `/`-separated, for the model
    name: str
    _folder_fd: int = field(repr=False)
    _limits: SandboxLimits = field(repr=False)
    _stats: WalkStats = field(repr=False)

    def read(self) -> bytes | None:
        """The file's bytes; None when it is not a regular file any more (a link or a FIFO swapped
        in), over the size limit, or unreadable (each counted in the stats)."""
        try:
            fd = os.open(self.name, _FILE_FLAGS, dir_fd=self._folder_fd)
        except OSError as exc:
            _count_refusal(self._stats, exc, self.name, self._folder_fd)
            return None
        with os.fdopen(fd, "rb") as f:
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    return None
                if info.st_size > self._limits.max_file_bytes:
                    self._stats.too_large += 1
                    return None
                self._stats.files_read += 1
                data = f.read(self._limits.max_file_bytes + 1)  # the file may grow after fstat
            except OSError:
                self._stats.unreadable += 1
                return None
        if len(data) > self._limits.max_file_bytes:
            self._stats.too_large += 1
            return None
        return data


def _count_refusal(stats: WalkStats, exc: OSError, name: str, folder_fd: int) -> None:
    """Count why an open relative to `folder_fd` failed: a link (swapped in after the listing),
    gone or changed kind (nothing to say), or refused by the system."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        if _is_link(name, folder_fd):
            stats.symlinks_skipped += 1
    elif exc.errno not in (errno.ENOENT, errno.EISDIR):
        stats.unreadable += 1


def _is_link(name: str, folder_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def supported() -> bool:
    """Whether this platform can open files relative to directory descriptors (Linux, macOS)."""
    return os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd and os.scandir in os.supports_fd


def _show(relative: str) -> str:
    shown = relative if len(relative) <= _SHOWN_PATH_CHARS else relative[:_SHOWN_PATH_CHARS] + "..."
    return repr(shown)


def _components(relative: str, max_depth: int) -> list[str]:
    """The folder names of `relative` below the root, `.` and `..` resolved on the names.
    ToolError if it is absolute, leaves the root or is deeper than the walk goes."""
    if os.path.isabs(relative) or relative.startswith("~"):
        raise ToolError(f"path {_show(relative)} must be relative to the search root")
    if "\0" in relative:
        raise ToolError(f"path {_show(relative)} has a NUL character")
    parts: list[str] = []
    for name in relative.replace("\\", "/").split("/"):
        if name in ("", "."):
            continue
        if name == "..":
            if not parts:
                raise ToolError(f"path {_show(relative)} is outside the search root")
            parts.pop()
        else:
            parts.append(name)
    if len(parts) > max_depth:
        raise ToolError(f"path {_show(relative)} is {len(parts)} folders deep; the search goes at most "
                        f"{max_depth} below its root")
    return parts


def _open_start(root: os.PathLike[str] | str, relative: str, max_depth: int) -> tuple[int, list[str]]:
    """A descriptor of folder `relative` under `root` (its names opened one by one, no link
    followed) and its names; ToolError saying why when it cannot be opened."""
    parts = _components(relative, max_depth)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root itself is configuration
    except OSError as exc:
        raise ToolError(f"the search root cannot be opened ({exc.strerror})") from exc
    for i, name in enumerate(parts):
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            link = exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(name, fd)
            os.close(fd)
            where = "/".join(parts[: i + 1])
            if link:
                raise ToolError(f"path {_show(relative)}: {_show(where)} is a symbolic link, which the search does "
                                "not follow (it may lead outside the search root)") from exc
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP):
                raise ToolError(f"no folder {_show(relative)} under the search root") from exc
            raise ToolError(f"folder {_show(where)} cannot be opened ({exc.strerror})") from exc
        os.close(fd)
        fd = child
    return fd, parts


@dataclass
class _Frame:
    """A folder being walked: its descriptor (open while its subfolders are), where it is, its
    files and the subfolders not entered yet."""

    fd: int
    parts: list[str]
    files: list[str] = field(default_factory=list)
    subfolders: Iterator[str] = field(default_factory=lambda: iter(()))


def walk(root: os.PathLike[str] | str, relative: str, limits: SandboxLimits, stats: WalkStats, *,
         cancel: CancelToken | None = None, clock: Clock | None = None) -> Iterator[SandboxFile]:
    """The regular files under folder `relative` of `root`, depth first: each folder's files in
    name order, then its subfolders in name order (os.walk's order).

    ToolError (before the first file) when `relative` is absolute, leaves the root, goes through
    a link or is not a folder. Links met on the way are skipped and counted; a limit reached or
    `cancel` set ends the walk with `stats.stopped` saying why. Close the iterator (or exhaust it)
    to release the descriptors: `with contextlib.closing(walk(...))`.
    """
    clock = clock or default_clock()
    deadline = clock.now_ns() + int(limits.time_budget_s * 1e9)

    def stop() -> bool:
        if stats.stopped is None:
            stats.stopped = _why_stop(limits, stats, cancel, clock, deadline)
        return stats.stopped is not None

    fd, parts = _open_start(root, relative, limits.max_depth)
    stack = [_Frame(fd, parts)]
    try:
        _list(stack[0], limits, stats)
        while stack:
            top = stack[-1]
            if top.files:
                if stop():  # checked only before more reading, so a note never says a finished walk was cut
                    return
                name = top.files.pop()  # sorted descending: pop gives name order
                yield SandboxFile("/".join([*top.parts, name]), name, top.fd, limits, stats)
                continue
            name = next(top.subfolders, None)
            if name is None:
                os.close(stack.pop().fd)
            elif len(top.parts) >= limits.max_depth:
                stats.too_deep += 1
            elif stop():
                return
            else:
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=top.fd)
                except OSError as exc:
                    _count_refusal(stats, exc, name, top.fd)
                    continue
                stack.append(_Frame(child, [*top.parts, name]))
                _list(stack[-1], limits, stats)
    finally:
        for frame in stack:
            os.close(frame.fd)


def _why_stop(limits: SandboxLimits, stats: WalkStats, cancel: CancelToken | None, clock: Clock,
              deadline: int) -> str | None:
    if cancel is not None and cancel.cancelled:
        return "stopped: the call was cancelled"
    if stats.files_read >= limits.max_files:
        return f"stopped after reading {limits.max_files:,} files (the most one search reads)"
    if clock.now_ns() >= deadline:
        return f"stopped after {limits.time_budget_s:g} s (the time one search may take)"
    return None


def _list(frame: _Frame, limits: SandboxLimits, stats: WalkStats) -> None:
    """List a folder once into its frame: files and subfolders, links counted and dropped. Stops
    listing at the walk's name budget."""
    files: list[str] = []
    subfolders: list[str] = []
    try:
        with os.scandir(frame.fd) as entries:
            for entry in entries:
                if stats.entries >= limits.max_entries:
                    stats.stopped = f"stopped after listing {limits.max_entries:,} names (the most one search lists)"
                    break
                stats.entries += 1
                if entry.is_symlink():
                    stats.symlinks_skipped += 1
                elif entry.is_dir(follow_symlinks=False):
                    subfolders.append(entry.name)
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.name)
                # FIFOs, sockets and devices are not notes: never opened
    except OSError:
        stats.unreadable += 1
    frame.files = sorted(files, reverse=True)
    frame.subfolders = iter(sorted(subfolders))
