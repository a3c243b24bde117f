#!/usr/bin/env bash
# gpu-check.sh: does `drover-worker --backend cuda` give the CPU's tokens?
#
# Runs on a machine with an NVIDIA GPU (written for one H200) and its
# driver (libcuda.so.1), with no network. For each model below it runs
# `generate` greedily for 32 tokens on the CPU and on the GPU, compares the
# token ids, prints a table, then measures tokens/s with `bench`. Exits 1
# on any mismatch or failure. Writes gpu-check.txt and results.jsonl under
# $OUT when set (else target/gpu-check/out).
#
# Models: stories260k.gguf (target/gpu-check/, carried; else
# ../shared/models/ or shared/models/), and fixtures made here by
# `drover-worker make-model` with stories260k's vocabulary: the `small`
# shape (256 wide, 4 blocks, 8 heads over 4 KV heads) as llama and as
# qwen2 (NEOX rope, QKV biases), in f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1, q2_k, q3_k, q3_k_m,
# q4_k, q5_k, q6_k, iq4_nl, iq4_xs, q4_k_m and q5_k_m; the llama q4_k_m one also split into two stages; a
# tied head (tied=1) in q8_0 and q4_k_m; a rope over 16 of each head's 32
# dimensions (rope_dims=16) as llama q8_0 and qwen2 q4_k; heads of their
# own size (4 heads of 48 in a 256-wide model, head_dim=48) in q8_0. Each run also
# writes the logits it sampled from (`generate --logits-out`), and so does
# a second CPU run on the portable kernels: while the tokens agree, the
# largest CPU-GPU logit difference is held to 1e-3, and where it is over,
# to the CPU's own difference between its kernel sets (see
# logit_difference). On a token mismatch the first differing position and
# both token ids are printed. Truncate and resume are not checked here:
# neither `generate` nor `bench` resumes from a cut (bench's --repeat cuts
# to 0 and starts over, untimed for tokens). Float models run twice on the
# GPU when cuBLAS loads: with cuBLAS, and with DROVER_CUBLAS=0 (the NVRTC
# kernel that stands in for it). `bench` then measures tokens/s, CPU and
# GPU side by side, on stories260K and 0.5b-shape q4_0 and q8_0 models,
# and on the GPU alone a 7b-shape q4_0 one (llama-2-7B's shape, 3.8 GB),
# with decode's fraction of the GPU's own copy bandwidth; each GPU bench
# twice, with decode steps replayed as a captured graph (the default) and
# without (DROVER_CUDA_GRAPH=0). Before the benches, `drover up` serves
# stories260K split over three local nodes with `backend = "cuda"` (agents,
# workers and iroh edges as separate processes), and one prompt's text must
# equal the CPU's (pipeline_check; PIPELINE_BACKEND=cpu tries it without a
# GPU).
#
# What it needs, and where it finds it:
# - drover-worker: target/gpu-check/drover-worker (a release build made
#   beforehand, as below; it needs GLIBC >= 2.34, and the report's header
#   names the machine's), else `cargo build --release --offline`.
# - NVRTC (libnvrtc.so.12 and libnvrtc-builtins.so.12.*, both needed: NVRTC
#   dlopens the builtins at compile time): the system's when the loader
#   finds it, else target/gpu-check/nvrtc-12.4.127.tar.xz, unpacked here
#   (NVIDIA's nvidia-cuda-nvrtc-cu12==12.4.127 wheel, xz-compressed: ~20 MB
#   where the raw libraries are ~65 MB).
# - cuBLAS (libcublas.so.12): optional; its wheel is ~600 MB, too large to
#   carry, so it is used only when the machine has it, and the float
#   products otherwise run on our own kernel.
#
# Prepare (on the development machine, where `cargo xtask setup` made the
# NVRTC venv):
#   mkdir -p target/gpu-check
#   L=$(ls -d ~/.cache/drover/nvidia-cuda-nvrtc-12.4.127/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib)
#   tar -C "$L" -cf - libnvrtc.so.12 libnvrtc-builtins.so.12.4 | xz -6 > target/gpu-check/nvrtc-12.4.127.tar.xz
#   cargo build --release --locked -p workers --bin drover-worker
#   cp "${CARGO_TARGET_DIR:-target}/release/drover-worker" target/gpu-check/
#   cp ../shared/models/stories260k.gguf target/gpu-check/  # ~1 MB; never committed
#   cargo build --release --locked -p runtime-real --bin drover --bin drover-agent
#   for b in drover drover-agent; do xz -6 -T0 -c "${CARGO_TARGET_DIR:-target}/release/$b" > target/gpu-check/$b.xz; done
# Run (the device tool; carry the one folder, ~45 MB):
#   run command="bash workers/gpu-check.sh" carry=["target/gpu-check"] timeout_s=480
set -uo pipefail
cd "$(dirname "$0")/.."

CARRY=target/gpu-check
OUT=${OUT:-$CARRY/out}
WORK=target/gpu-check-work # outside the carried folder
mkdir -p "$OUT" "$WORK/models" "$WORK/lib"
REPORT=$OUT/gpu-check.txt
RESULTS=$OUT/results.jsonl
: >"$REPORT"
: >"$RESULTS"
say() { echo "$*" | tee -a "$REPORT"; }

say "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi -L 2>&1 | tee -a "$REPORT" || say "nvidia-smi: not found"
say "glibc: $(ldd --version 2>&1 | head -1) (the carried binary needs >= 2.34)"

W=$CARRY/drover-worker
[ -f "$W" ] && chmod +x "$W" # the carry may drop the mode
if [ ! -x "$W" ]; then
  say "== building drover-worker (release, offline)"
  cargo build --release --offline -p workers --bin drover-worker >>"$REPORT" 2>&1 || {
    say "FAIL: cannot build drover-worker"
    exit 1
  }
  W=${CARGO_TARGET_DIR:-target}/release/drover-worker
fi

if ldconfig -p 2>/dev/null | grep -q 'libnvrtc.so.12 '; then
  say "NVRTC: the system's"
elif [ -f "$CARRY/nvrtc-12.4.127.tar.xz" ]; then
  command -v xz >/dev/null || {
    say "FAIL: xz not found: cannot unpack $CARRY/nvrtc-12.4.127.tar.xz (install xz-utils, or carry the libraries unpacked)"
    exit 1
  }
  tar -xJf "$CARRY/nvrtc-12.4.127.tar.xz" -C "$WORK/lib" || {
    say "FAIL: cannot unpack $CARRY/nvrtc-12.4.127.tar.xz"
    exit 1
  }
  export LD_LIBRARY_PATH="$PWD/$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "NVRTC: the carried 12.4.127 ($WORK/lib)"
else
  say "FAIL: no NVRTC on this machine and no $CARRY/nvrtc-12.4.127.tar.xz"
  exit 1
fi
# cudarc tries libcublas.so, then .so.12 and older: any of them is used.
if ldconfig -p 2>/dev/null | grep -Eq 'libcublas\.so(\.(9|10|11|12))? '; then
  CUBLAS=yes
  say "cuBLAS: found (float products also checked without it)"
else
  CUBLAS=no
  say "cuBLAS: not found (float products run on the NVRTC kernel)"
fi

say "== compiling the kernels for this GPU"
"$W" cuda-compile --arch sm_90 2>&1 | tee -a "$REPORT"
[ "${PIPESTATUS[0]}" = 0 ] || {
  say "FAIL: cuda-compile"
  exit 1
}

STORIES=
for s in "$CARRY/stories260k.gguf" ../shared/models/stories260k.gguf shared/models/stories260k.gguf; do
  [ -f "$s" ] && { STORIES=$s; break; }
done
MODELS=()
VOCAB=()
if [ -n "$STORIES" ]; then
  MODELS+=("stories260k=$STORIES")
  VOCAB=(--vocab-from "$STORIES")
else
  say "stories260k.gguf: not on this machine; fixtures get a made-up vocabulary"
fi
for arch in llama qwen2; do
  for ty in f32 f16 bf16 q8_0 q5_0 q5_1 q4_0 q4_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs q3_k_m q4_k_m q5_k_m; do
    path=$WORK/models/small-$arch-$ty.gguf
    if [ ! -f "$path" ]; then
      "$W" make-model --shape "small,arch=$arch" --type "$ty" --seed 7 \
        ${VOCAB[@]+"${VOCAB[@]}"} "$path" >>"$REPORT" 2>&1 || say "FAIL: make-model $arch $ty"
    fi
    MODELS+=("$arch-$ty=$path")
  done
done
for entry in tied-q8_0:small,tied=1:q8_0 tied-q4_k_m:small,tied=1:q4_k_m \
  rope16-q8_0:small,rope_dims=16:q8_0 qwen2-rope16-q4_k:small,arch=qwen2,rope_dims=16:q4_k \
  heads48-q8_0:small,heads=4,kv_heads=2,head_dim=48:q8_0; do
  IFS=: read -r name shape ty <<<"$entry"
  path=$WORK/models/$name.gguf
  [ -f "$path" ] || "$W" make-model --shape "$shape" --type "$ty" --seed 7 \
    ${VOCAB[@]+"${VOCAB[@]}"} "$path" >>"$REPORT" 2>&1 || say "FAIL: make-model $shape $ty"
  MODELS+=("$name=$path")
done

FAILED=0
tokens() { grep -o '"tokens":\[[^]]*\]' <<<"$1"; }
# The first position where two `"tokens":[...]` lists differ, and the ids
# there (`-` past a list's end).
first_difference() {
  local -a a b
  IFS=, read -r -a a <<<"$(sed 's/.*\[//; s/\]//' <<<"$1")"
  IFS=, read -r -a b <<<"$(sed 's/.*\[//; s/\]//' <<<"$2")"
  local i n=$((${#a[@]} > ${#b[@]} ? ${#a[@]} : ${#b[@]}))
  for ((i = 0; i < n; i++)); do
    if [ "${a[i]-}" != "${b[i]-}" ]; then
      say "  first difference at generated token $i: cpu ${a[i]:--} gpu ${b[i]:--}"
      return
    fi
  done
}
# Hangs are counted in a file: `gen` mostly runs inside $(...), a subshell,
# where a variable's increment would be lost.
HANGS=$WORK/hangs
: >"$HANGS"
gen() { # model backend logits-file [extra args...]
  local model=$1 backend=$2 logits=$3
  shift 3
  # A run past 30 s is a hang here (these models take well under a second);
  # after three hangs the GPU runs stop, so one bug cannot eat the lease.
  timeout 30 "$W" generate --model "$model" --prompt "Once upon a time" --max-tokens 32 \
    --temperature 0 --json --backend "$backend" --logits-out "$logits" "$@" 2>>"$OUT/stderr.log"
  local rc=$?
  [ "$rc" = 124 ] && { echo "$backend $model" >>"$HANGS"; say "  timed out: $backend $model"; }
  return "$rc"
}
# The largest difference between the CPU's and the GPU's logits over the
# steps both sampled from, then the same between the CPU's two kernel sets
# (its SIMD one and DROVER_KERNELS=portable): the yardstick. Where the
# activations are rounded to a narrow type before a product (f16, bf16,
# Q8_0, Q8_K), a sum that differs in its last bit can round one value the
# other way, and on these random fixtures such a flip moves logits by up to
# ~0.1, on the CPU between its own kernel sets too. Verdict: `ok` within
# 1e-3; `spread` above that but within twice the CPU's own difference;
# `OVER` beyond both (a failure).
logit_difference() { # cpu gpu portable
  python3 - "$1" "$2" "$3" <<'PY'
import array, sys
def read(path):
    a = array.array("f")
    data = open(path, "rb").read()
    a.frombytes(data[: len(data) // 4 * 4])  # a run cut short: whole floats
    return a
def diff(a, b):
    n = min(len(a), len(b))
    return max((abs(x - y) for x, y in zip(a[:n], b[:n])), default=float("inf"))
cpu, gpu, portable = (read(p) for p in sys.argv[1:4])
d, own = diff(cpu, gpu), diff(cpu, portable)
verdict = "ok" if d <= 1e-3 else "spread" if d <= 2 * own else "OVER"
print(f"{d:.2e} {own:.2e} {verdict}")
PY
}
check() { # name model label cublas(1|0) [extra args...]
  local name=$1 model=$2 label=$3 cublas=$4
  shift 4
  local cpu gpu verdict diff="- - -" logits=none
  if [ "$(wc -l <"$HANGS")" -ge 3 ]; then
    say "$name $label: skipped (three runs hung)"
    FAILED=1
    return
  fi
  cpu=$(tokens "$(gen "$model" cpu "$WORK/cpu.f32" "$@")")
  DROVER_KERNELS=portable gen "$model" cpu "$WORK/portable.f32" "$@" >/dev/null
  gpu=$(tokens "$(DROVER_CUBLAS=$cublas gen "$model" cuda "$WORK/gpu.f32" "$@")")
  if [ -n "$cpu" ] && [ "$cpu" = "$gpu" ]; then verdict=same; else verdict=DIFFERENT; FAILED=1; fi
  if [ -s "$WORK/cpu.f32" ] && [ -s "$WORK/gpu.f32" ] && [ -s "$WORK/portable.f32" ]; then
    diff=$(logit_difference "$WORK/cpu.f32" "$WORK/gpu.f32" "$WORK/portable.f32")
    logits=${diff##* }
    case $logits in
    ok | spread) ;;
    OVER) FAILED=1 ;;
    *)
      diff="- - -"
      logits=unchecked # python3 missing or failing (its message is above)
      FAILED=1
      ;;
    esac
  fi
  rm -f "$WORK/cpu.f32" "$WORK/gpu.f32" "$WORK/portable.f32"
  read -r gpu_diff own_diff _ <<<"$diff"
  printf '%-22s %-16s %-9s %-10s %-10s %s\n' "$name" "$label" "$verdict" "$gpu_diff" "$own_diff" "$logits" |
    tee -a "$REPORT"
  [ "$verdict" = same ] || { first_difference "$cpu" "$gpu"; say "  cpu: $cpu"; say "  gpu: $gpu"; }
  printf '{"model":"%s","run":"%s","match":%s,"max_logit_difference":"%s","cpu_portable_difference":"%s","logits":"%s"}\n' \
    "$name" "$label" "$([ "$verdict" = same ] && echo true || echo false)" "$gpu_diff" "$own_diff" "$logits" >>"$RESULTS"
}

say "== greedy tokens and logits, cpu vs cuda (32 tokens; logits compared while the tokens agree)"
printf '%-22s %-16s %-9s %-10s %-10s %s\n' model run tokens "cpu-gpu" "cpu-cpu" logits | tee -a "$REPORT"
say "(cpu-gpu: the largest |logit difference| between the backends; cpu-cpu: the same between the CPU's SIMD and portable kernels)"
for entry in ${MODELS[@]+"${MODELS[@]}"}; do
  name=${entry%%=*}
  model=${entry#*=}
  [ -f "$model" ] || { say "FAIL: $model missing"; FAILED=1; continue; }
  check "$name" "$model" cuda 1
  case $name in
  *-f32 | *-f16 | *-bf16 | stories260k)
    [ "$CUBLAS" = yes ] && check "$name" "$model" "cuda no-cuBLAS" 0
    ;;
  esac
done
check "llama-q4_k_m split" "$WORK/models/small-llama-q4_k_m.gguf" "cuda --split 2,2" \
  1 --split 2,2

# A pipeline across processes: `drover up examples/pipeline.toml` (three
# local nodes, each an agent and its `drover-worker stage`, edges over iroh
# on loopback) with `backend = "cuda"`, one prompt, its text compared byte
# for byte with `drover-worker generate` on the CPU.
# Needs drover and drover-agent carried (xz-compressed, as below).
pipeline_check() {
  local bin=$WORK/bin state=$WORK/pipeline plan=$WORK/pipeline.toml model=${1:-} b
  local want got up rc i backend=${PIPELINE_BACKEND:-cuda}
  say "== a pipeline across processes (drover up, 3 local nodes, backend = \"$backend\")"
  [ -n "$model" ] || { say "FAIL: pipeline: no model"; FAILED=1; return; }
  mkdir -p "$bin"
  for b in drover drover-agent; do
    if [ -f "$CARRY/$b.xz" ]; then
      xz -dc "$CARRY/$b.xz" >"$bin/$b" || { say "FAIL: pipeline: cannot unpack $CARRY/$b.xz"; FAILED=1; return; }
    elif [ -f "$CARRY/$b" ]; then
      cp "$CARRY/$b" "$bin/$b"
    else
      say "FAIL: pipeline: no $CARRY/$b.xz (see Prepare)"
      FAILED=1
      return
    fi
    chmod +x "$bin/$b"
  done
  cp "$W" "$bin/drover-worker" # the agent runs the worker beside itself
  rm -rf "$state"
  # The README's example, on this model and backend, with a port of its
  # own, the node caches under $WORK, and the loader path that finds the
  # carried NVRTC (a local node starts its agent with a cleared
  # environment; the agent passes its own on to the worker).
  sed -e "s|^path = .*|path = \"$PWD/$model\"|" \
    -e "s|^group = \"workers\".*|&\nbackend = \"$backend\"|" \
    -e 's|^rpc_addr = .*|rpc_addr = "127.0.0.1:0"|' \
    -e "s|DROVER_CACHE_DIR=[^ ]*|LD_LIBRARY_PATH='${LD_LIBRARY_PATH:-}' DROVER_CACHE_DIR=$PWD/$WORK/slice-cache|" \
    examples/pipeline.toml >"$plan"
  for edit in "^path = \"$PWD/$model\"" "^backend = \"$backend\"" '^rpc_addr = "127.0.0.1:0"' "DROVER_CACHE_DIR=$PWD/$WORK/slice-cache"; do
    grep -qF -- "${edit#^}" "$plan" || {
      say "FAIL: pipeline: examples/pipeline.toml changed shape (no ${edit#^} after the edits)"
      FAILED=1
      return
    }
  done
  want=$(timeout 60 "$W" generate --model "$model" --prompt "Once upon a time" --max-tokens 32 --temperature 0 2>>"$OUT/stderr.log") || {
    say "FAIL: pipeline: drover-worker generate on the CPU failed, exit $?"
    FAILED=1
    return
  }
  # --foreground: a stop reaches drover once (without it, timeout sends
  # the signal to drover and to its whole group, and a second stop is
  # drover's "leave now"); -k: killed 30 s after a stop that hangs.
  PATH="$bin:$PATH" timeout --foreground -k 30 180 "$bin/drover" --state-dir "$state" up "$plan" </dev/null >"$OUT/pipeline-up.log" 2>&1 &
  up=$!
  # Serving within 60 s (it takes about a second on a CPU).
  for ((i = 0; i < 600; i++)); do
    grep -q '^ready:' "$OUT/pipeline-up.log" 2>/dev/null && break
    kill -0 "$up" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -q '^ready:' "$OUT/pipeline-up.log"; then
    if kill -0 "$up" 2>/dev/null; then
      say "FAIL: pipeline: drover up did not serve within 60 s (its log: $OUT/pipeline-up.log)"
      kill -TERM "$up" 2>/dev/null
      wait "$up"
    else
      wait "$up"
      say "FAIL: pipeline: drover up ended before serving, exit $? (its log: $OUT/pipeline-up.log):"
      say "  $(tail -1 "$OUT/pipeline-up.log")"
    fi
    FAILED=1
    return
  fi
  got=$(timeout 60 "$bin/drover" --state-dir "$state" prompt "Once upon a time" --max-tokens 32 2>>"$OUT/stderr.log")
  rc=$?
  if [ "$rc" != 0 ]; then
    say "FAIL: pipeline: drover prompt failed, exit $rc (stderr: $OUT/stderr.log)"
    FAILED=1
  elif [ "$got" = "$want" ]; then
    say "pipeline $(basename "$model") $backend x3: same text as drover-worker generate on the CPU"
  else
    say "pipeline $(basename "$model") $backend x3: DIFFERENT"
    say "  cpu:      $want"
    say "  pipeline: $got"
    FAILED=1
  fi
  kill -TERM "$up" 2>/dev/null
  wait "$up"
  rc=$?
  [ "$rc" = 0 ] || { say "FAIL: pipeline: drover up exited $rc after the stop (log: $OUT/pipeline-up.log)"; FAILED=1; }
  grep -E 'stage|cuda|GPU|error' "$OUT/pipeline-up.log" | tail -5 >>"$REPORT"
}
pipeline_check "${STORIES:-$WORK/models/small-llama-q8_0.gguf}"

say "== tokens/s (decode's fraction: bytes read per token / the copy bandwidth of the memory read, the GPU's for cuda)"
BIG=$WORK/models/0.5b-q4_0.gguf
SEVEN=$WORK/models/7b-q4_0.gguf
STORIES_BENCH=()
[ -n "$STORIES" ] && STORIES_BENCH=("$STORIES")
[ -f "$BIG" ] || "$W" make-model --shape 0.5b --type q4_0 --seed 7 "$BIG" >>"$REPORT" 2>&1
bench() { # model backend seconds [graph: 1|0]
  local line graph=${4:-1} label=$2
  [ "$graph" = 0 ] && label="$2 (no graph)"
  line=$(DROVER_CUDA_GRAPH=$graph timeout "$3" "$W" bench --model "$1" --backend "$2" --prefill 128 \
    --decode 64 --repeat 2 --json 2>>"$OUT/stderr.log") || { say "FAIL: bench $label $1"; FAILED=1; return; }
  echo "$line" >>"$RESULTS"
  say "$(basename "$1") $label: $(grep -o '"prefill_tokens_per_s":[0-9.]*' <<<"$line") $(grep -o '"decode_tokens_per_s":[0-9.]*' <<<"$line") $(grep -o '"decode_bandwidth_fraction":[0-9.]*' <<<"$line") $(grep -o '"copy_bandwidth_bytes_per_s":[0-9.e+]*' <<<"$line") $(grep -o '"load_s":[0-9.]*' <<<"$line") $(grep -o '"kernels":"[^"]*"' <<<"$line")"
}
BIG8=$WORK/models/0.5b-q8_0.gguf
[ -f "$BIG8" ] || "$W" make-model --shape 0.5b --type q8_0 --seed 7 "$BIG8" >>"$REPORT" 2>&1
# cuda twice: decode steps as one captured graph (the default), and each
# kernel launched on its own (DROVER_CUDA_GRAPH=0).
for model in ${STORIES_BENCH[@]+"${STORIES_BENCH[@]}"} "$BIG" "$BIG8"; do
  bench "$model" cpu 90
  bench "$model" cuda 90
  bench "$model" cuda 90 0
done
# llama-2-7B's shape in q4_0 (3.8 GB), on the GPU only (the CPU would take
# minutes of the lease).
t0=$(date +%s)
[ -f "$SEVEN" ] || "$W" make-model --shape 7b --type q4_0 --seed 7 "$SEVEN" >>"$REPORT" 2>&1 ||
  { say "FAIL: make-model 7b"; FAILED=1; }
say "made the 7b q4_0 model in $(($(date +%s) - t0)) s"
[ -f "$SEVEN" ] && bench "$SEVEN" cuda 200 && bench "$SEVEN" cuda 200 0

if [ "$FAILED" = 0 ]; then say "== gpu-check: every run matched"; else say "== gpu-check: FAILED (above)"; fi
exit "$FAILED"
