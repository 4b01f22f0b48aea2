"""A probe for the quantized-weights issue, not part of the library: the time of one decode
step's linear layers at SmolLM2-135M-Instruct's shapes (30 layers and the tied head, random
weights) in fp32, bf16, weight-only int8 (`aten._weight_int8pack_mm`) and group-wise int4
(`aten._weight_int4pack_mm_for_cpu`, groups of 32 and 64), at 1 token and at a 9-token verify
width, interleaved over 5 repeats, beside this machine's copy bandwidth. The weights (513 MiB in
fp32) do not fit in cache, so each step streams them from memory as a real decode step does.

    .venv/bin/python scripts/quant_probe.py [THREADS]
"""
import time, torch, statistics, sys
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
torch.manual_seed(0)
H, I, KV, L, V = 576, 1536, 192, 30, 49152
shapes = [(H, H), (KV, H), (KV, H), (H, H), (I, H), (I, H), (H, I)] * L + [(V, H)]
ws = [torch.randn(n, k) * 0.02 for n, k in shapes]
def int8(w):
    s = w.abs().amax(1) / 127
    return torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8), s
def int4(w, g):
    n, k = w.shape
    wg = w.reshape(n, k // g, g); mn = wg.amin(-1, keepdim=True); mx = wg.amax(-1, keepdim=True)
    scale = ((mx - mn) / 15).clamp_min(1e-6); zero = mn + scale * 8
    q = torch.round((wg - mn) / scale).clamp(0, 15).to(torch.int32).reshape(n, k)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    sz = torch.cat([scale.reshape(n, k // g, 1), zero.reshape(n, k // g, 1)], -1).transpose(0, 1).contiguous().to(torch.bfloat16)
    return packed, sz
q8 = [int8(w) for w in ws]
q4 = {g: [int4(w, g) for w in ws] for g in (32, 64)}
wb = [w.bfloat16() for w in ws]
def step(kind, x):
    if kind == "fp32":
        for w in ws: torch.nn.functional.linear(x[:, : w.shape[1]], w)
    elif kind == "bf16":
        xb = x.bfloat16()
        for w in wb: torch.nn.functional.linear(xb[:, : w.shape[1]], w)
    elif kind == "int8":
        for q, s in q8: torch.ops.aten._weight_int8pack_mm(x[:, : q.shape[1]].contiguous(), q, s)
    else:
        g = int(kind[5:]); xb = x.bfloat16()
        for (p, sz), w in zip(q4[g], ws): torch.ops.aten._weight_int4pack_mm_for_cpu(xb[:, : w.shape[1]].contiguous(), p, g, sz)
nbytes = {"fp32": sum(w.numel() * 4 for w in ws), "bf16": sum(w.numel() * 2 for w in ws),
          "int8": sum(w.numel() + w.shape[0] * 4 for w in ws), "int4_32": sum(w.numel() // 2 + w.numel() // 32 * 4 for w in ws),
          "int4_64": sum(w.numel() // 2 + w.numel() // 64 * 4 for w in ws)}
buf = torch.empty(2**28 // 4); src = torch.randn(2**28 // 4)
bw = []
for _ in range(5):
    t = time.perf_counter(); buf.copy_(src); bw.append(2 * src.numel() * 4 / (time.perf_counter() - t) / 1e9)
print(f"copy bandwidth (1 GiB moved): {max(bw):.1f} GB/s best of 5")
for width in (1, 9):
    x = torch.randn(width, I)
    res = {k: [] for k in nbytes}
    for r in range(5):
        for k in (list(nbytes) if r % 2 == 0 else list(reversed(nbytes))):
            t = time.perf_counter(); step(k, x); res[k].append(time.perf_counter() - t)
    base = statistics.median(res["fp32"])
    for k, v in res.items():
        m = statistics.median(v)
        print(f"width {width} {k:9s} {m*1e3:7.1f} ms/step  {base/m:5.2f}x fp32  {nbytes[k]/2**20:6.0f} MiB  {nbytes[k]/m/1e9:5.1f} GB/s")
