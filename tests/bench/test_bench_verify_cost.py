"""`agenttrace bench verify-cost`: the curve, the roofline figures and the speedup bounds, on a
tiny random model (the figures' values are the machine's; their shape and bookkeeping are not)."""

from __future__ import annotations

import pytest

from agenttrace.bench.verify_cost import PRESETS, build_model, markdown, measure


def test_the_curve_starts_at_one_and_bounds_use_measured_widths(tiny_model):
    r = measure(tiny_model, "tiny", context=32, widths=(1, 2, 4), repeats=2)
    assert [p.n for p in r.points] == [1, 2, 4] and r.points[0].relative == 1.0
    assert all(p.ms > 0 and p.gflops > 0 for p in r.points)
    assert r.parameters == sum(p.numel() for p in tiny_model.parameters())
    assert r.peak_bandwidth_gb_s is None and r.bandwidth_gb_s > 0  # a CPU: no peak figures
    assert [b.alpha for b in r.bounds] == [0.5, 0.7, 0.9] and all(b.best_k in (1, 3) for b in r.bounds)
    text = markdown(r)
    assert "| n (tokens scored) | ms | t(n) / t(1) | GFLOP/s |" in text and "| 4 |" in text


def test_random_presets_have_the_public_shapes_and_unknown_ones_are_refused():
    model, name = build_model("random:tiny", "cpu", "float32")
    assert name == "random:tiny" and model.config.num_hidden_layers == PRESETS["tiny"]["num_hidden_layers"]
    assert PRESETS["llama-8b"]["hidden_size"] == 4096 and PRESETS["smollm2-135m"]["num_hidden_layers"] == 30
    with pytest.raises(SystemExit, match="unknown preset 'huge'"):
        build_model("random:huge", "cpu", "float32")
