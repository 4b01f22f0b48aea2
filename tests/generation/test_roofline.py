"""The roofline figures: FLOPs and bytes of a pass from the model's shapes, phases summed per
generation, their place against the machine's peaks, and the span attributes."""

from __future__ import annotations

import pytest

from agenttrace.core.roofline import ModelShape, Roofline, RooflineMeter, RooflinePhase, merge, phase_order

SHAPE = ModelShape(layers=2, heads=4, head_dim=8, vocab=100, hidden=32, layer_params=10_000, weight_bytes=500_000,
                   kv_bytes_per_token=256)


def test_a_pass_counts_products_attention_and_bytes_from_the_shapes():
    flops, moved = SHAPE.pass_cost([(10, 1)], logit_rows=1)
    # 2 per weight per row, the head's 2·vocab·hidden, 4·layers·heads·head_dim per key seen (11 keys)
    assert flops == 2 * 10_000 + 2 * 100 * 32 + 4 * 2 * 4 * 8 * 11
    assert moved == 500_000 + 256 * 11
    # a batch of 8 reads the weights once: its intensity is ~8x a single step's
    batch_flops, batch_bytes = SHAPE.pass_cost([(10, 1)] * 8, logit_rows=8)
    assert batch_flops / batch_bytes > 6 * flops / moved
    # a verify pass of 4 rows: the rows see 11..14 keys
    f4, _ = SHAPE.pass_cost([(10, 4)], logit_rows=4)
    assert f4 == 4 * (2 * 10_000 + 2 * 100 * 32) + 4 * 2 * 4 * 8 * (11 + 12 + 13 + 14)


def test_the_meter_sums_by_phase_and_the_record_places_each_against_the_roofs():
    meter = RooflineMeter(SHAPE)
    meter.add("verify@4", [(10, 4)], 4, 0.002)
    meter.add("decode", [(10, 1)], 1, 0.001)
    meter.add("decode", [(11, 1)], 1, 0.001)
    meter.add("prefill", [(0, 10)], 1, 0.003)
    peaks = type("Peaks", (), {"matmul_gflop_s": 100.0, "read_gb_s": 10.0, "device": "cpu"})()
    roof = meter.result(peaks)
    assert [p.phase for p in roof.phases] == ["prefill", "decode", "verify@4"]
    decode = roof.phases[1]
    assert decode.passes == 2 and decode.rows == 2 and decode.seconds == pytest.approx(0.002)
    assert roof.ridge == pytest.approx(10.0)  # 100 GFLOP/s over 10 GB/s
    assert roof.bound(decode) == "memory" and decode.intensity < 1
    assert roof.roof(decode.intensity) == pytest.approx(10e9 * decode.intensity)
    assert Roofline(roof.phases).bound(decode) == "-"  # no peaks measured: no verdict
    merged = merge([*roof.phases, *roof.phases])
    assert merged[1].passes == 4 and merged[1].intensity == pytest.approx(decode.intensity)


def test_phases_sort_by_kind_then_width():
    names = ["batch@16", "verify@9", "decode", "batch@2", "prefill", "verify@2"]
    assert sorted(names, key=phase_order) == ["prefill", "decode", "verify@2", "verify@9", "batch@2", "batch@16"]


def test_the_model_shape_counts_logical_products_whatever_the_storage():
    from agenttrace.generation.ceiling import model_shape
    from agenttrace.generation.quantize import quantize_model
    from tests.generation.test_quantize import small

    fp32 = model_shape(small())
    model = small()
    quantize_model(model, "int4")
    int4 = model_shape(model)
    assert int4.layer_params == fp32.layer_params > 0
    assert int4.weight_bytes < fp32.weight_bytes / 2


def test_a_generation_span_carries_the_roofline_and_the_batch(tiny_model):
    from agenttrace import semconv as sc
    from agenttrace.core.chat import BatchFigures, Generation
    from agenttrace.telemetry.generation_attributes import generation_attributes

    roof = Roofline((RooflinePhase("prefill", 1, 10, 1e6, 1e5, 0.01), RooflinePhase("batch@8", 3, 24, 3e6, 2e5, 0.03)),
                    100e9, 10e9, "cpu")
    gen = Generation("x", 10, 3, "stop", 0, 10, 0, 1, batch=BatchFigures(6.5, 8, 4, "load_aware", "k=0 at batch 8", 0.5, 0.75),
                     roofline=roof)
    attrs = generation_attributes(gen)
    assert attrs[sc.ROOFLINE_PHASE] == ("prefill", "batch@8")
    assert attrs[sc.ROOFLINE_INTENSITY] == (10.0, 15.0)
    assert attrs[sc.ROOFLINE_PEAK_BYTES_S] == 10e9 and attrs[sc.ROOFLINE_DEVICE] == "cpu"
    assert attrs[sc.BATCH_SIZE] == 6.5 and attrs[sc.BATCH_SIZE_MAX] == 8
    assert attrs[sc.SPEC_POLICY] == "load_aware" and attrs[sc.SPEC_POLICY_REASON] == "k=0 at batch 8"
    assert attrs[sc.SPEC_POLICY_K0_SHARE] == 0.75


def test_the_h200_prediction_finds_the_compute_bound_passes_of_a_large_batch():
    from agenttrace.bench.verify_cost import predict

    table = predict("llama-8b", "H200", 512, (1, 128), (1, 8))
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| 1") and "---" not in line]
    by = {(int(b), int(n)): (bound.strip(), float(ratio)) for b, n, _, bound, ratio in rows}
    assert by[(1, 8)] == ("memory", 1.0)  # verifying 8 tokens at batch 1 costs what one does
    assert by[(128, 8)][0] == "compute" and by[(128, 8)][1] > 2  # at batch 128 it costs several plain steps
    with pytest.raises(SystemExit, match="no data-sheet peaks"):
        predict("llama-8b", "TPU", 512, (1,), (1,))
