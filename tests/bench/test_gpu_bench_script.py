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
    mod.WHEELS = mod.PAYLOAD / "wheels"
    mod.SITE = mod.PAYLOAD / "site"
    (tmp_path / "scripts").mkdir()
    mod.PAYLOAD.mkdir()
    return mod


def test_the_gguf_is_joined_only_from_both_parts_with_the_right_checksum(tmp_path, capsys):
    mod = _payload_module(tmp_path)
    data = os.urandom(1000)
    (tmp_path / "scripts" / "gpu_payload.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {mod.GGUF_NAME}\n")
    (mod.PAYLOAD / "gguf.part0").write_bytes(data[:600])
    assert mod.gguf() == 1 and "carry .gpu_payload/gguf.part1" in capsys.readouterr().out
    (mod.PAYLOAD / "gguf.part1").write_bytes(data[600:599] + b"corrupt")
    assert mod.gguf() == 1 and "do not match" in capsys.readouterr().out
    assert not (mod.PAYLOAD / mod.GGUF_NAME).exists()
    (mod.PAYLOAD / "gguf.part1").write_bytes(data[600:])
    assert mod.gguf() == 0 and (mod.PAYLOAD / mod.GGUF_NAME).read_bytes() == data
    assert mod.gguf() == 0 and "model:" in capsys.readouterr().out  # already joined


def test_without_wheels_install_uses_what_the_python_has(tmp_path, capsys):
    mod = _payload_module(tmp_path)
    assert mod.install() == 0 and "no wheels here" in capsys.readouterr().out


def test_the_dependency_closure_leaves_torch_and_grpc_out():
    spec = importlib.util.spec_from_file_location("gpu_payload_c", ROOT / "scripts" / "gpu_payload.py")
    payload = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(payload)
    pins = payload.closure()
    assert {"transformers", "opentelemetry-sdk", "pydantic", "gguf", "tokenizers"} <= set(pins)
    assert not {"torch", "numpy", "grpcio", "opentelemetry-exporter-otlp-proto-grpc"} & set(pins)


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
