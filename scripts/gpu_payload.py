"""What scripts/gpu_bench.sh carries to a GPU machine that has no network, in pieces that fit
the 64 MiB a run may copy with the working tree: the dependencies the machine's image lacks, as
wheels, and the bundled model's GGUF in parts. Standard library only (it runs before anything is
installed).

    python scripts/gpu_payload.py pack      here, with network: fill .gpu_payload/carry1, carry2, ...
    python scripts/gpu_payload.py install   there: install what is missing into .gpu_payload/site
    python scripts/gpu_payload.py gguf      there: join the GGUF parts when all are present
    python scripts/gpu_payload.py status    there: what is present and what to carry next

Each `.gpu_payload/carryN` is one run's carry: carry1 holds the wheels and the GGUF's first
part, the others its next parts. Files a run leaves stay there while the machine is warm, so the
runs must follow each other within its idle window (30 s).
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
WHEELS = PAYLOAD / "carry1" / "wheels"
SITE = PAYLOAD / "site"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
LIMIT = 64 * 2**20
SLACK = 2**20  # under the limit: the tree may grow a little between packing and the runs
# The runtime dependencies a GPU run imports (torch and numpy come with the machine's torch; the
# gRPC exporter is imported only for --otlp-protocol grpc and its wheel alone is 6 MB a Python;
# llama.cpp's prebuilt CPU library, so the backends can be compared on the GPU machine's cores).
ROOTS = ("opentelemetry-api", "opentelemetry-sdk", "opentelemetry-semantic-conventions",
         "opentelemetry-exporter-otlp-json-file", "opentelemetry-exporter-otlp-proto-http", "jsonschema", "pydantic",
         "rich", "platformdirs", "transformers", "gguf", "llama-cpp-py-sync")
LEAVE = {"torch", "numpy", "jinja2", "markupsafe", "opentelemetry-exporter-otlp-proto-grpc", "grpcio",
         # transformers' optional hub pieces: downloads and hub kernels, neither used offline
         "hf-xet", "kernels"}
# In the H200 image (/work/.library/device/KINDS.md, its package list) at versions our pins'
# requirements accept, so they need not travel: the GGUF takes three runs as it is, and these
# 9 MiB would make it four. install() uses the image's copy, and says so when there is none.
IMAGE_HAS = {"tokenizers", "safetensors", "pyyaml", "charset-normalizer", "filelock", "fsspec", "certifi", "urllib3",
             "anyio", "packaging", "click", "requests", "idna", "tqdm", "h11", "pygments", "shellingham", "typer",
             "markdown-it-py", "mdurl"}
# Not installed here, fetched for the GPU machine: NVML's Python binding, for the energy figures.
EXTRAS = ("nvidia-ml-py",)
PYTHONS = ("3.12",)  # the H200 image's Python (3.12.3); binary wheels for it alone


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


def _tree_bytes() -> int:
    out = subprocess.run(["bash", "-c", "git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1"],
                         cwd=ROOT, capture_output=True, text=True).stdout
    return int(out.split()[0])


def pack() -> int:
    """Download the wheels (pure ones once, binary ones for PYTHONS) into carry1, and split the
    GGUF over carry1 (what the wheels leave) and as many more carries as it needs."""
    import shutil

    for old in PAYLOAD.glob("carry*"):
        shutil.rmtree(old)
    WHEELS.mkdir(parents=True)
    pins = {k: v for k, v in closure().items() if k not in IMAGE_HAS}
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(WHEELS)]
    for name, version in pins.items():
        spec = f"{name}=={version}"
        if subprocess.run([*pip, spec], capture_output=True).returncode == 0 and _is_pure(name):
            continue
        if not _is_pure(name):  # this Python's binary wheel, not the one the machine wants
            for wheel in WHEELS.glob(f"{name.replace('-', '_')}-{version}-*"):
                wheel.unlink()
        for py in PYTHONS:  # a binary wheel for the machine's Python
            subprocess.run([*pip, "--python-version", py, "--implementation", "cp", "--platform",
                            "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform",
                            "manylinux_2_28_x86_64", spec], capture_output=True)
    for name in EXTRAS:  # newest version, pure Python
        subprocess.run([*pip, name], check=True, capture_output=True)
        wheel = next(f for f in WHEELS.iterdir() if _key(f.name.split("-")[0]) == _key(name))
        pins[_key(name)] = wheel.name.split("-")[1]
    (WHEELS / "requirements.json").write_text(json.dumps(pins, indent=1))
    from agenttrace.generation.models import find_bundled_gguf

    data = find_bundled_gguf().read_bytes()
    tree = _tree_bytes()
    room = LIMIT - SLACK - tree
    wheels = sum(f.stat().st_size for f in WHEELS.iterdir())
    first, rest = data[:max(0, room - wheels)], data[max(0, room - wheels):]
    parts = [first] + [rest[i:i + room] for i in range(0, len(rest), room)]
    for i, part in enumerate(parts):
        folder = PAYLOAD / f"carry{i + 1}"
        folder.mkdir(exist_ok=True)
        (folder / f"gguf.part{i}").write_bytes(part)
    (ROOT / "scripts" / "gpu_payload.sha256").write_text(
        f"{hashlib.sha256(data).hexdigest()}  {GGUF_NAME}  parts={len(parts)}\n")
    for folder in sorted(PAYLOAD.glob("carry*")):
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        print(f"{folder.name}: {size / 2**20:.1f} MiB (+ {tree / 2**20:.1f} MiB working tree)")
    print("carry, one run each, each within 30 s of the last: "
          + ", then ".join(f".gpu_payload/{f.name}" for f in sorted(PAYLOAD.glob("carry*"))))
    return 0


def _is_pure(name: str) -> bool:
    return any(f.name.endswith("-none-any.whl") and _key(f.name.split("-")[0]) == _key(name) for f in WHEELS.iterdir())


def install() -> int:
    """Install into .gpu_payload/site each pinned distribution this Python lacks or has at another
    version (the site folder goes first on PYTHONPATH); the image's own copy of what did not
    travel (IMAGE_HAS). Says what could not be installed."""
    pins_file = WHEELS / "requirements.json"
    if not pins_file.exists():
        print("no wheels here (carry .gpu_payload/carry1); using what this Python has")
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
    absent = []
    for name in sorted(IMAGE_HAS):
        try:
            md.version(name)
        except md.PackageNotFoundError:
            absent.append(name)
    if absent:
        print(f"dependencies: not in this image and not carried: {', '.join(absent)}")
    if not want:
        print(f"dependencies: all {len(pins)} present")
        return 1 if absent else 0
    SITE.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--find-links", str(WHEELS),
           "--target", str(SITE), "--upgrade", *want]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:  # one at a time, to say which ones failed
        failed = [w for w in want if subprocess.run([*cmd[:-len(want)], w], capture_output=True).returncode != 0]
        print(f"dependencies: could not install {', '.join(failed)} (no wheel for this Python?)")
        return 1
    print(f"dependencies: installed {len(want)} into {SITE}")
    return 1 if absent else 0


def _manifest() -> tuple[str, int]:
    fields = (ROOT / "scripts" / "gpu_payload.sha256").read_text().split()
    return fields[0], int(fields[2].removeprefix("parts="))


def gguf() -> int:
    """Join the parts into .gpu_payload/GGUF_NAME when all are here and the checksum matches."""
    target = PAYLOAD / GGUF_NAME
    expected, count = _manifest()
    if target.exists() and _sha(target) == expected:
        print(f"model: {target}")
        return 0
    parts = [PAYLOAD / f"carry{i + 1}" / f"gguf.part{i}" for i in range(count)]
    missing = [p for p in parts if not p.exists()]
    if missing:
        print(f"model: missing {len(missing)} of {count} parts; carry .gpu_payload/{missing[0].parent.name} next")
        return 1
    target.write_bytes(b"".join(p.read_bytes() for p in parts))
    if _sha(target) != expected:
        target.unlink()
        print("model: the joined parts do not match scripts/gpu_payload.sha256; pack again and carry every part")
        return 1
    print(f"model: joined into {target}")
    return 0


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def status() -> int:
    have = [p.name for p in sorted(PAYLOAD.glob("carry*"))] + [p for p in ("site", GGUF_NAME) if (PAYLOAD / p).exists()]
    print("payload present: " + (", ".join(have) or "nothing"))
    return 0


if __name__ == "__main__":
    commands = {"pack": pack, "install": install, "gguf": gguf, "status": status}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(commands)}}}")
    sys.exit(commands[sys.argv[1]]())
