"""A full or read-only disk (issue 31, item 7 and the writes of item 3): the trace file keeps whole
lines only and counts the batches it lost, in one line and not a traceback per batch; an
unwritable trace path never stops the agent; `-o` and `--jaeger-json` give one line and a
non-zero exit. The disk is a real full tmpfs where the machine allows one (a user and mount
namespace), else RLIMIT_FSIZE (the kernel cuts a write at the limit, as a full disk does)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agenttrace.telemetry.files import LineFile, write_whole

ROOT = Path(__file__).resolve().parents[2]

# Each span is its own batch (synchronous): 3 written, then the disk fills and 5 fail, the first
# part-way through its line; then space comes back and 4 more are written.
_WORKER = r"""
import json, os, resource, signal, sys
from agenttrace.telemetry import Telemetry

path, how = sys.argv[1], sys.argv[2]
tel = Telemetry(trace_file=path, synchronous=True, flush_on_sigterm=False)

def spans(n):
    for _ in range(n):
        with tel.span("agent", "invoke_agent a", {"gen_ai.agent.name": "a", "pad": "x" * 3000}):
            pass

filler = os.path.join(os.path.dirname(path), "filler")
spans(3)
if how == "rlimit":  # the next line stops 1,000 bytes in, as on a disk that fills
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 1000, hard))
else:  # fill the tmpfs: the trace file's last page still takes part of a line
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass
spans(5)
if how == "rlimit":
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
else:
    os.remove(filler)
spans(4)
s = tel.shutdown()
name = f"file {path}"
print(json.dumps({"exported": s.exported[name], "failed": s.failed[name], "batches": s.batches_failed[name],
                  "lost_to": s.lost_to.get(name)}))
"""


def _tmpfs_allowed(folder: Path) -> bool:
    """Whether this machine lets us mount a tmpfs in a user and mount namespace of our own."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1"', "sh", str(folder)],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def _run_worker(tmp_path: Path, how: str) -> tuple[dict, str, Path]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTTRACE_STRICT_TELEMETRY": "1"}
    if how == "rlimit":
        trace = tmp_path / "t.jsonl"
        cmd = [sys.executable, "-c", _WORKER, str(trace), how]
    else:  # a 64 KiB tmpfs, mounted in a namespace of its own (gone when it ends): the file is copied out
        mnt = tmp_path / "mnt"
        script = 'mount -t tmpfs -o size=64k tmpfs "$1" && "$2" -c "$3" "$1/t.jsonl" tmpfs; rc=$?; ' \
                 'cat "$1/t.jsonl" > "$4"; exit $rc'
        trace = tmp_path / "copy.jsonl"
        cmd = ["unshare", "-rm", "sh", "-c", script, "sh", str(mnt), sys.executable, _WORKER, str(trace)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr, trace


@pytest.mark.parametrize("how", ["rlimit", "tmpfs"])
def test_a_disk_that_fills_and_comes_back_leaves_whole_lines_and_one_line_per_outage(tmp_path, how):
    (tmp_path / "mnt").mkdir()
    if how == "tmpfs" and not _tmpfs_allowed(tmp_path / "mnt"):
        pytest.skip("no user and mount namespace here for a full tmpfs (the rlimit case stands in)")
    summary, stderr, trace = _run_worker(tmp_path, how)
    data = trace.read_bytes()
    assert data.endswith(b"\n")
    readable = [json.loads(line) for line in data.splitlines()]  # every line whole: this would raise
    spans = sum(len(ss["spans"]) for d in readable for rs in d["resourceSpans"] for ss in rs["scopeSpans"])
    assert spans == summary["exported"] == 7  # what the summary says was written is what reads back
    assert summary["failed"] == summary["batches"] == 5
    why = "No space left on device" if how == "tmpfs" else "File too large"
    assert summary["lost_to"] == why
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    # the first failure, the recovery, the exit summary: one line each, not one per batch
    assert len(lines) == 3, stderr
    assert "failed (the agent goes on" in lines[0] and why in lines[0]
    assert lines[1].endswith(f"works again; 5 batches / 5 spans lost to: {why}")
    assert f"5 batches / 5 spans lost to: {why}" in lines[2]


def test_a_line_cut_short_that_cannot_be_cut_back_is_followed_on_a_new_line(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"torn": ')  # an earlier writer stopped mid-line
    lines = LineFile(path)
    lines.append(b'{"a": 1}\n')
    real_write = os.write
    calls = []

    def full_after_3(fd, data):  # takes 3 bytes, then the disk is full; meanwhile another writer appends
        if fd != lines._fd:
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            n = real_write(fd, bytes(data[:3]))
            with open(path, "ab") as other:
                other.write(b'{"other": 1}\n')
            return n
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_after_3)
    with pytest.raises(OSError):
        lines.append(b'{"b": 2}\n')
    monkeypatch.setattr(os, "write", real_write)
    lines.append(b'{"c": 3}\n')
    lines.close()
    # the other writer's line stays; ours could not be cut back, so the next starts a new line
    assert path.read_bytes().split(b"\n") == [b'{"torn": ', b'{"a": 1}', b'{"b{"other": 1}', b'{"c": 3}', b""]


def fill_after_first_write(monkeypatch, nbytes, ours):
    """os.write on the descriptors `ours` picks: the first write takes `nbytes`, then the disk is
    full. Returns the real os.write."""
    real_write = os.write
    calls = []

    def full(fd, data):
        if not ours(fd):
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:nbytes]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    return real_write


def test_a_refused_write_is_cut_back_to_the_last_whole_line(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    lines = LineFile(path)
    lines.append(b'{"a": 1}\n')
    real_write = fill_after_first_write(monkeypatch, 4, lambda fd: fd == lines._fd)
    with pytest.raises(OSError, match="No space left"):
        lines.append(b'{"b": 2}\n')
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == b'{"a": 1}\n'
    lines.append(b'{"c": 3}\n')
    assert path.read_bytes() == b'{"a": 1}\n{"c": 3}\n'


def _agent_runs_with_trace_file(trace_file: Path, caplog) -> list[logging.LogRecord]:
    import agenttrace as at

    caplog.set_level(logging.WARNING)
    at.configure(trace_file=trace_file, synchronous=True, metrics=True)
    said_at_configure = [r for r in caplog.records if r.levelno >= logging.WARNING]
    ran = []
    with at.agent_span("a", task_id="t1"), at.turn_span():
        ran.append(True)
    summary = at.shutdown()
    assert ran == [True]
    name = f"file {trace_file}"
    assert summary.exported[name] == 0 and summary.failed[name] == summary.submitted[name] > 0
    assert all(r.exc_info is None for r in caplog.records)
    return said_at_configure


def test_configure_with_a_trace_file_that_cannot_be_created_lets_the_agent_run(tmp_path, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # a file where the trace file's folder should be: fails for root too
    said = _agent_runs_with_trace_file(blocker / "traces" / "t.jsonl", caplog)
    assert len(said) == 1 and "cannot open it" in said[0].getMessage() and "the agent goes on" in said[0].getMessage()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores folder modes")
def test_configure_into_a_read_only_folder_lets_the_agent_run(tmp_path, caplog):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        said = _agent_runs_with_trace_file(folder / "t.jsonl", caplog)
    finally:
        folder.chmod(0o700)
    assert len(said) == 1 and "Permission denied" in said[0].getMessage()


def test_write_whole_leaves_the_old_file_when_the_disk_fills(tmp_path, monkeypatch):
    out = tmp_path / "report.json"
    out.write_text("old report\n")
    out.chmod(0o640)
    real_write = fill_after_first_write(monkeypatch, 10, lambda fd: fd not in (0, 1, 2))
    with pytest.raises(OSError):
        write_whole(out, "new report " * 100)
    monkeypatch.setattr(os, "write", real_write)
    assert out.read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file left
    write_whole(out, "new\n")
    assert out.read_text() == "new\n" and (out.stat().st_mode & 0o777) == 0o640


def _cli(*argv: str) -> tuple[int, str]:
    from agenttrace.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


@pytest.fixture
def trace(tmp_path) -> Path:
    from trace_builder import S, write_trace

    step = S("agent_step 1", "step", 0.0, 2.0, {"agenttrace.step.index": 1})
    path = tmp_path / "t.jsonl"
    write_trace(path, S("invoke_agent a", "agent", 0.0, 2.0, {"gen_ai.agent.name": "a"}, [step]))
    return path


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("argv", [["report", "{t}", "-o", "/dev/full"],
                                  ["report", "{t}", "--format", "json", "-o", "/dev/full"],
                                  ["compare", "{t}", "{t}", "--format", "markdown", "-o", "/dev/full"],
                                  ["export", "{t}", "--jaeger-json", "/dev/full"]])
def test_output_to_a_full_disk_is_one_line_and_a_failed_exit(trace, argv):
    code, err = _cli(*(a.format(t=trace) for a in argv))
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        f"agenttrace {argv[0]}: could not write /dev/full: No space left on device; nothing was written")
    assert "Traceback" not in err and not [line for line in err.splitlines() if line.startswith("wrote")]


def test_output_into_a_missing_folder_is_one_line_and_leaves_nothing(trace, tmp_path):
    out = tmp_path / "gone" / "r.md"
    code, err = _cli("report", str(trace), "--format", "markdown", "-o", str(out))
    assert code == 1 and err.strip() == (
        f"agenttrace report: could not write {out}: No such file or directory; nothing was written")
    assert not out.parent.exists()
