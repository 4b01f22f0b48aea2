"""Shared fixtures. Under tests, failures in agenttrace's own recording code raise instead of
being counted, so they cannot hide behind the telemetry guard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("AGENTTRACE_STRICT_TELEMETRY", "1")
# Under xdist (scripts/test runs two workers) each worker gets its share of the cores for torch's
# and llama.cpp's threads: two workers of two threads each on two cores measured 46% more CPU time
# (threads spinning on busy cores) and the suite only 16% faster than one worker. Tests that choose
# their own thread count (the lossless-under-load ones) still do.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))

_prebuild: subprocess.Popen | None = None


def pytest_collection_finish(session):
    """Start building the cached environments the collected tests declare (a module's
    CACHED_ENVIRONMENTS, see tests/prebuild_envs.py) in the background, at the lowest priority,
    so that installing them overlaps the session's other tests instead of adding to its time."""
    global _prebuild
    names: list[str] = []
    for item in session.items:
        module = getattr(item, "module", None)
        for name in getattr(module, "CACHED_ENVIRONMENTS", ()):
            if name not in names:
                names.append(name)
    if not names or session.config.option.collectonly or os.environ.get("AGENTTRACE_PREBUILD") == "0":
        return
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":  # under xdist every worker collects: one builds
        return
    cache = getattr(session.config, "cache", None)  # None under -p no:cacheprovider
    log = Path(cache.mkdir("prebuild")) / "prebuild.log" if cache else os.devnull
    here = Path(__file__).resolve().parent
    with open(log, "w") as out:
        _prebuild = subprocess.Popen(["nice", "-n", "19", sys.executable, str(here / "prebuild_envs.py"), *names],
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def pytest_sessionfinish(session, exitstatus):
    """An environment still being built when the session ends is left half-built (no stamp): the
    next session builds it again."""
    if _prebuild is not None and _prebuild.poll() is None:
        os.killpg(_prebuild.pid, signal.SIGTERM)  # pip and venv too: the group started for it
        try:
            _prebuild.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(_prebuild.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def heads(tmp_path_factory):
    """EAGLE and Medusa heads trained on a tiny random model (tests/tiny_heads.py, ~30 s), trained
    once for the session: the drafting, tree, batching and training tests only read them."""
    from tests.tiny_heads import tiny_heads

    return tiny_heads(str(tmp_path_factory.mktemp("tiny-heads")))


@pytest.fixture(scope="session")
def bundled():
    """The bundled SmolLM2 model (converted into the cache on first use, ~30 s; then ~1 s)."""
    from agenttrace.generation.models import load_model

    return load_model()


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory):
    """A real Arize Phoenix (tests/phoenix_server.py), started once for the whole session (about
    15 s; its environment is built on first use) and stopped at its end. Tests that write to it
    use projects of their own (OTLP header x-project-name), or read only the spans they sent."""
    from phoenix_server import running_phoenix

    with running_phoenix(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


@pytest.fixture
def tiny_model():
    """A tiny random-weight Llama built from a config: 2 layers, vocabulary of 64."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config)
    model.eval()
    return model
