"""What scripts/gpu_bench.sh carries to a GPU machine that has no network, in pieces that fit
the 64 MiB a run may copy: the project's pure-Python dependencies as wheels, and the bundled
model's GGUF in two parts. Standard library only (it runs before anything is installed).

    python scripts/gpu_payload.py pack      here, with network: fill .gpu_payload/
    python scripts/gpu_payload.py install   there: install what is missing into .gpu_payload/site
    python scripts/gpu_payload.py gguf      there: join the GGUF parts when both are present
    python scripts/gpu_payload.py status    there: what is present and what to carry next
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = ROOT / ".gpu_payload"
WHEELS = PAYLOAD / "wheels"
SITE = PAYLOAD / "site"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PARTS = ("gguf.part0", "gguf.part1")
PART_BYTES = 48 * 2**20
LIMIT = 64 * 2**20
# The runtime dependencies a GPU run imports (torch and numpy come with the machine's torch; the
# gRPC exporter is imported only for --otlp-protocol grpc and its wheel alone is 6 MB a Python).
ROOTS = ("opentelemetry-api", "opentelemetry-sdk", "opentelemetry-semantic-conventions",
         "opentelemetry-exporter-otlp-json-file", "opentelemetry-exporter-otlp-proto-http", "jsonschema", "pydantic",
         "rich", "platformdirs", "transformers", "gguf")
LEAVE = {"torch", "numpy", "jinja2", "markupsafe", "opentelemetry-exporter-otlp-proto-grpc", "grpcio"}
# Not installed here, fetched for the GPU machine: NVML's Python binding, for the energy figures.
EXTRAS = ("nvidia-ml-py",)
PYTHONS = ("3.11", "3.12", "3.13")  # the project needs 3.11 or later


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure() -> dict[str, str]:
    """name -> version of ROOTS and everything they need, as installed here."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = {**default_environment(), "extra": ""}
    seen: dict[str, str] = {}
    stack = list(ROOTS)
    while stack:
        name = stack.pop()
        if _key(name) in seen or _key(name) in LEAVE:
            continue
        dist = md.distribution(name)
        seen[_key(name)] = dist.version
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(env):
                stack.append(req.name)
    return dict(sorted(seen.items()))


def pack() -> int:
    """Download the wheels (pure ones once, binary ones per Python version) and split the GGUF."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    pins = closure()
    (WHEELS / "requirements.json").write_text(json.dumps(pins, indent=1))
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(WHEELS)]
    for name, version in pins.items():
        spec = f"{name}=={version}"
        if subprocess.run([*pip, spec], capture_output=True).returncode == 0 and _is_pure(name):
            continue
        for py in PYTHONS:  # a binary wheel: one per Python version the machine might have
            subprocess.run([*pip, "--python-version", py, "--implementation", "cp", "--platform",
                            "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform",
                            "manylinux_2_28_x86_64", spec], capture_output=True)
    for name in EXTRAS:  # newest version, pure Python
        subprocess.run([*pip, name], check=True, capture_output=True)
        wheel = next(f for f in WHEELS.iterdir() if _key(f.name.split("-")[0]) == _key(name))
        pins[_key(name)] = wheel.name.split("-")[1]
    (WHEELS / "requirements.json").write_text(json.dumps(pins, indent=1))
    from agenttrace.generation.models import find_bundled_gguf

    gguf = find_bundled_gguf()
    data = gguf.read_bytes()
    for i, part in enumerate(PARTS):
        (PAYLOAD / part).write_bytes(data[i * PART_BYTES:(i + 1) * PART_BYTES] if i + 1 < len(PARTS) else data[i * PART_BYTES:])
    (ROOT / "scripts" / "gpu_payload.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {GGUF_NAME}\n")
    sizes = {"wheels": sum(f.stat().st_size for f in WHEELS.iterdir()), **{p: (PAYLOAD / p).stat().st_size for p in PARTS}}
    tree = int(subprocess.run(["bash", "-c", "git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1"],
                              cwd=ROOT, capture_output=True, text=True).stdout.split()[0])
    for name, size in sizes.items():
        total = size + tree
        print(f"{name}: {size / 2**20:.1f} MiB (+ {tree / 2**20:.1f} MiB working tree = {total / 2**20:.1f} MiB)"
              + ("" if total <= LIMIT else "  OVER THE 64 MiB LIMIT"))
    print("carry, one run each: .gpu_payload/wheels, then .gpu_payload/gguf.part0, then .gpu_payload/gguf.part1")
    return 0 if all(s + tree <= LIMIT for s in sizes.values()) else 1


def _is_pure(name: str) -> bool:
    return any(f.name.endswith("-none-any.whl") and _key(f.name.split("-")[0]) == _key(name) for f in WHEELS.iterdir())


def install() -> int:
    """Install into .gpu_payload/site each pinned distribution this Python lacks or has at another
    version (the site folder goes first on PYTHONPATH). Says what could not be installed."""
    pins_file = WHEELS / "requirements.json"
    if not pins_file.exists():
        print("no wheels here (carry .gpu_payload/wheels); using what this Python has")
        return 0
    pins = json.loads(pins_file.read_text())
    sys.path.insert(0, str(SITE))
    want = []
    for name, version in pins.items():
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            have = None
        if have != version:
            want.append(f"{name}=={version}")
    if not want:
        print(f"dependencies: all {len(pins)} present")
        return 0
    SITE.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--find-links", str(WHEELS),
           "--target", str(SITE), "--upgrade", *want]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:  # one at a time, to say which ones failed
        failed = [w for w in want if subprocess.run([*cmd[:-len(want)], w], capture_output=True).returncode != 0]
        print(f"dependencies: could not install {', '.join(failed)} (no wheel for this Python?)")
        return 1
    print(f"dependencies: installed {len(want)} into {SITE}")
    return 0


def gguf() -> int:
    """Join the parts into .gpu_payload/GGUF_NAME when both are here and the checksum matches."""
    target = PAYLOAD / GGUF_NAME
    expected = (ROOT / "scripts" / "gpu_payload.sha256").read_text().split()[0]
    if target.exists() and _sha(target) == expected:
        print(f"model: {target}")
        return 0
    missing = [p for p in PARTS if not (PAYLOAD / p).exists()]
    if missing:
        print(f"model: missing {', '.join(missing)}; carry .gpu_payload/{missing[0]} in the next run")
        return 1
    target.write_bytes(b"".join((PAYLOAD / p).read_bytes() for p in PARTS))
    if _sha(target) != expected:
        target.unlink()
        print("model: the joined parts do not match scripts/gpu_payload.sha256; pack again and carry both parts")
        return 1
    print(f"model: joined into {target}")
    return 0


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def status() -> int:
    have = [p for p in ("wheels", *PARTS, GGUF_NAME) if (PAYLOAD / p).exists()]
    print("payload present: " + (", ".join(have) or "nothing"))
    return 0


if __name__ == "__main__":
    commands = {"pack": pack, "install": install, "gguf": gguf, "status": status}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(commands)}}}")
    sys.exit(commands[sys.argv[1]]())
