"""Choosing the backend by measuring the caller's workload (generation/backend_choice.py)."""

from __future__ import annotations

import pytest

from agenttrace.clock import FakeClock
from agenttrace.generation import backend_choice
from agenttrace.generation.backend_choice import choose_backend


@pytest.fixture
def both(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTTRACE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(backend_choice, "available_backends", lambda: ("torch", "llama.cpp"))


def test_the_faster_wins_measured_interleaved_and_is_remembered(both):
    clock, order, prepared = FakeClock(), [], []
    cost = {"torch": 2.0, "llama.cpp": 1.5}

    def measure(backend: str) -> None:
        order.append(backend)
        clock.advance_s(cost[backend])

    choice = choose_backend("w", measure, prepare=prepared.append, clock=clock)
    assert prepared == ["torch", "llama.cpp"]  # loaded before, untimed
    assert order == ["torch", "llama.cpp", "llama.cpp", "torch"]  # A B B A: both see the same drift
    assert (choice.backend, choice.seconds, choice.cached) == ("llama.cpp", {"torch": 2.0, "llama.cpp": 1.5}, False)
    assert "llama.cpp 1.50 s, torch 2.00 s" in choice.describe()
    again = choose_backend("w", lambda b: pytest.fail("measured twice"), clock=clock)
    assert again.backend == "llama.cpp" and again.cached and "measured earlier" in again.describe()
    other = choose_backend("another workload", measure, clock=clock)  # a workload of its own
    assert not other.cached


def test_a_backend_that_fails_loses_and_the_reason_says_why(both):
    clock = FakeClock()

    def measure(backend: str) -> None:
        if backend == "torch":
            raise RuntimeError("out of memory")
        clock.advance_s(9.0)

    choice = choose_backend("w", measure, clock=clock)
    assert choice.backend == "llama.cpp" and "torch failed (RuntimeError: out of memory)" in choice.reason
    with pytest.raises(RuntimeError, match="no backend ran"):
        choose_backend("v", lambda b: (_ for _ in ()).throw(ValueError("no")), clock=clock)


def test_with_one_backend_installed_nothing_is_measured(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTTRACE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(backend_choice, "available_backends", lambda: ("torch",))
    choice = choose_backend("w", lambda b: pytest.fail("measured"))
    assert choice.backend == "torch" and "llamacpp extra" in choice.describe()
