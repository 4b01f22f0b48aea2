"""scripts/gpu_bench.sh and its payload helper: a clear stop without a GPU, the GGUF joined from
its parts only when the checksum holds, a plain message when there are no wheels to install."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _payload_module(tmp_path: Path):
    spec = importlib.util.spec_from_file_location("gpu_payload", ROOT / "scripts" / "gpu_payload.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.ROOT = tmp_path
    mod.PAYLOAD = tmp_path / ".gpu_payload"
    mod.WHEELS = mod.PAYLOAD / "carry1" / "wheels"
    mod.SITE = mod.PAYLOAD / "site"
    (tmp_path / "scripts").mkdir()
    mod.PAYLOAD.mkdir()
    return mod


def test_the_gguf_is_joined_only_from_every_carried_part_with_the_right_checksum(tmp_path, capsys):
    mod = _payload_module(tmp_path)
    data = os.urandom(1000)
    (tmp_path / "scripts" / "gpu_payload.sha256").write_text(
        f"{hashlib.sha256(data).hexdigest()}  {mod.GGUF_NAME}  parts=3\n")
    for i, (a, b) in enumerate([(0, 400), (400, 700), (700, 1000)][:2]):
        (mod.PAYLOAD / f"carry{i + 1}").mkdir()
        (mod.PAYLOAD / f"carry{i + 1}" / f"gguf.part{i}").write_bytes(data[a:b])
    assert mod.gguf() == 1 and "missing 1 of 3 parts; carry .gpu_payload/carry3 next" in capsys.readouterr().out
    (mod.PAYLOAD / "carry3").mkdir()
    (mod.PAYLOAD / "carry3" / "gguf.part2").write_bytes(b"corrupt")
    assert mod.gguf() == 1 and "do not match" in capsys.readouterr().out
    assert not (mod.PAYLOAD / mod.GGUF_NAME).exists()
    (mod.PAYLOAD / "carry3" / "gguf.part2").write_bytes(data[700:])
    assert mod.gguf() == 0 and (mod.PAYLOAD / mod.GGUF_NAME).read_bytes() == data
    assert mod.gguf() == 0 and "model:" in capsys.readouterr().out  # already joined


def test_what_the_image_has_is_not_carried_and_its_absence_is_named(tmp_path, capsys, monkeypatch):
    mod = _payload_module(tmp_path)
    mod.WHEELS.mkdir(parents=True)
    (mod.WHEELS / "requirements.json").write_text("{}")
    monkeypatch.setattr(mod, "IMAGE_HAS", {"packaging", "surely-not-installed-anywhere"})
    assert mod.install() == 1
    assert "not in this image and not carried: surely-not-installed-anywhere" in capsys.readouterr().out


def test_without_wheels_install_uses_what_the_python_has(tmp_path, capsys):
    mod = _payload_module(tmp_path)
    assert mod.install() == 0 and "no wheels here" in capsys.readouterr().out


def test_the_dependency_closure_leaves_torch_and_grpc_out():
    spec = importlib.util.spec_from_file_location("gpu_payload_c", ROOT / "scripts" / "gpu_payload.py")
    payload = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(payload)
    pins = payload.closure()
    assert {"transformers", "opentelemetry-sdk", "pydantic", "gguf", "tokenizers", "llama-cpp-py-sync"} <= set(pins)
    assert not {"torch", "numpy", "grpcio", "opentelemetry-exporter-otlp-proto-grpc", "kernels", "hf-xet"} & set(pins)


@pytest.mark.skipif(sys.platform != "linux", reason="a bash script for the Linux GPU machines")
def test_the_script_stops_clearly_when_torch_sees_no_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run([str(ROOT / "scripts" / "gpu_bench.sh"), "run", "--device", "cuda"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "sees no CUDA device; use --device cpu for a dry run" in proc.stdout
    assert "sees no CUDA device" in (tmp_path / "gpu_bench.log").read_text()


@pytest.mark.skipif(sys.platform != "linux", reason="a bash script for the Linux GPU machines")
def test_the_dry_run_installs_the_project_and_passes_the_preflight(tmp_path):
    """`--device cpu`: the project installed from the tree (agents/ as agenttrace.examples), the
    preflight, stage A's time check (a budget too short for it: its command has tests of its own),
    and one archive with the log back in $OUT."""
    import tarfile

    marker = ROOT / ".gpu_payload" / "state" / "verify_cost_tiny.done"
    marker.unlink(missing_ok=True)
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    try:
        proc = subprocess.run([str(ROOT / "scripts" / "gpu_bench.sh"), "run", "--device", "cpu", "--budget", "60",
                               "--stage-a-only"],
                              env=env, capture_output=True, text=True, timeout=400)
    finally:
        marker.unlink(missing_ok=True)
    log = (tmp_path / "gpu_bench.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    assert "could not install the project" not in log
    preflight = next(line for line in log.splitlines() if "preflight:" in line)
    # a tiny model generated speculatively (verify passes ran) through load_model, on the CPU
    assert "preflight: ok on cpu (8 tokens," in preflight and " 0 rounds" not in preflight
    assert "stage A: no time left for tiny" in log and "stopping after stage A" in log
    archive = next(tmp_path.glob("gpu-bench-*.tar.gz"))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "./preflight.txt" in names and "./gpu_bench.log" in names
