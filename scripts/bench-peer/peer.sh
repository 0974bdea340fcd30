#!/bin/bash
# make bench/peer: llama.cpp against lesfarm on the same GGUF, alternating
# round by round (issue 31 item 3). A benchmark, not a test.
#
# llama.cpp is node-llama-cpp's prebuilt CPU build (npm, pinned to PIN
# in lib.sh: llama.cpp release v0.5.0, one libggml-cpu-<variant>.so per x86
# level, chosen by ggml at run time; the variant that ran is printed).
# Each round, in rotating order (odd rounds llama.cpp first, even rounds
# lesfarm first; with BASE, round i starts with the ((i-1) mod 3)th of
# llama.cpp, lesfarm, base):
#   resident   pp64 and tg32 at 1 and 2 threads, every weight in RAM
#              (llama.cpp mmaps the file in the page cache, lesfarm bench
#              reads it into RAM), one warm-up, then one measured run each;
#   capped     decode tok/s under a cgroup v1 memory cap of non-expert
#              bytes + 20% of the expert bytes + 150 MiB, read-ahead 128 KiB,
#              1 thread: llama.cpp's mmap with repacking off (its AVX2-and-up
#              variants, which repack Q4_K into anonymous memory and are
#              OOM-killed at the cap, are left out of a second install), and
#              lesfarm generate --mode scheduled --storage direct
#              --expert-budget 20%.
# With BASE set to another lesfarm binary (an older commit's build), each
# resident pair also runs it as the engine "lesfarm-base", the order of the
# three engines rotating round by round, for a before/after ratio measured
# in the same rounds.
# Then it prints per-round ratios (lesfarm / llama.cpp, and lesfarm / base)
# with min, median, max and the median's distribution-free interval (sign
# test: about 95% from 6 rounds on; 5 rounds give the whole range, 94%),
# on wall-clock t/s and on t/s per CPU-second of each process
# (summary.mjs), with each round's load average. On a shared host one
# round's ratio moves by 15% or more; ROUNDS=9 gives a median's interval
# about ±10% wide.
#
#   scripts/bench-peer/peer.sh [MODEL.gguf]
# Environment: ROUNDS (3), PEER_DIR (/tmp/lesfarm-peer: npm installs, the
# default model, results), LESFARM (the lesfarm binary; default: built from
# this checkout), DEV (vda: the disk whose read_ahead_kb is set), CAP (bytes;
# default computed as above), BASE (see above), CAPPED_ROWS (1; 0 skips the
# capped rows). The capped rows need root (cgroup v1 memory controller,
# /sys/block); without root they are skipped.
# Without MODEL it synthesizes the qwen35moe 35B-A3B-scaled preset (Q4_K,
# about 4.4 GB) into PEER_DIR once.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
LOG_PREFIX=bench/peer
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-3}
PEER_DIR=${PEER_DIR:-/tmp/lesfarm-peer}
DEV=${DEV:-vda}
mkdir -p "$PEER_DIR"
PEER_DIR=$(cd "$PEER_DIR" && pwd)
OUT=$PEER_DIR/results.jsonl

lesfarm_binary

install "$PEER_DIR/full"
cp "$HERE/llama.mjs" "$PEER_DIR/full/llama.mjs"
# The no-repack install: the same files (hard links) without the variants
# that have AVX2 (ggml repacks Q4_K to q4_K_8x8 only with AVX2).
NR=$PEER_DIR/norepack
if [ ! -d "$NR/node_modules" ]; then
  mkdir -p "$NR"
  cp -al "$PEER_DIR/full/node_modules" "$NR/node_modules"
  cp "$PEER_DIR/full/package.json" "$NR/"
  for v in haswell skylakex icelake cascadelake cannonlake cooperlake zen4 alderlake sapphirerapids; do
    rm -f "$NR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-cpu-$v.so"
  done
fi
cp "$HERE/llama.mjs" "$NR/llama.mjs"

M=${1:-}
if [ -z "$M" ]; then
  M=$PEER_DIR/qwen35moe-35b-a3b-scaled-q4_k.gguf
  if [ ! -f "$M" ]; then
    log "synthesizing $M"
    "$LESFARM" synth --preset qwen35moe-35b-a3b-scaled --type Q4_K -o "$M" --quiet
  fi
fi
[ -f "$M" ] || { log "model $M does not exist"; exit 2; }

CAPPED=${CAPPED_ROWS:-1}
if [ "$CAPPED" = 1 ] && { [ "$(id -u)" != 0 ] || [ ! -w /sys/fs/cgroup/memory ] || [ ! -w /sys/block/$DEV/queue/read_ahead_kb ]; }; then
  log "not root or no cgroup v1 memory controller: skipping the capped rows"
  CAPPED=0
fi
# The cap: non-expert bytes + 20% of the expert bytes + 150 MiB. lesfarm
# reports the 20% expert budget in bytes; experts = 5 × that.
if [ "$CAPPED" = 1 ] && [ -z "${CAP:-}" ]; then
  b=$("$LESFARM" generate --model "$M" --prompt x --max-tokens 1 --mode scheduled --storage direct \
      --expert-budget 20% --format json --threads 1 2>/dev/null | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).budget_bytes))')
  size=$(stat -c %s "$M")
  CAP=$(( size - 4 * b + 150 * 1024 * 1024 ))
fi
CAP=${CAP:-0}
log "model $M ($(stat -c %s "$M") bytes), cap $CAP bytes, $ROUNDS rounds, results in $OUT"

CG=/sys/fs/cgroup/memory/lesfarm-bench-peer-$$
capped() { # capped CMD...: run CMD in the memory cgroup, stdout to stdout
  mkdir -p "$CG"
  echo "$CAP" > "$CG/memory.limit_in_bytes"
  echo "$CAP" > "$CG/memory.memsw.limit_in_bytes" 2>/dev/null || true
  dd if="$M" iflag=nocache count=0 status=none
  local rc=0
  sh -c "echo \$\$ > $CG/cgroup.procs; exec \"\$@\"" sh "$@" || rc=$?
  log "capped $(basename "$1"): exit $rc, max_usage $(cat "$CG/memory.max_usage_in_bytes") bytes"
  rmdir "$CG"
}
OLD_RA=$(cat /sys/block/$DEV/queue/read_ahead_kb 2>/dev/null || echo "")
cleanup() {
  [ -d "$CG" ] && rmdir "$CG" 2>/dev/null || true
  [ "$CAPPED" = 1 ] && [ -n "$OLD_RA" ] && echo "$OLD_RA" > /sys/block/$DEV/queue/read_ahead_kb || true
}
trap cleanup EXIT

# emit ROUND TEST THREADS ENGINE: read one JSON object on stdin and append
# {round,test,threads,engine,tps,...} lines to OUT.
emit() {
  node "$HERE/emit.mjs" "$@" >> "$OUT"
}
llama_resident() { # round threads
  node "$PEER_DIR/full/llama.mjs" "$M" "$2" both 64 32 2>/dev/null | emit "$1" resident "$2" llama.cpp
}
lesfarm_resident() {
  lesfarm_bench "$LESFARM" "$@" | emit "$1" resident "$2" lesfarm
}
base_resident() {
  lesfarm_bench "$BASE" "$@" | emit "$1" resident "$2" lesfarm-base
}
lesfarm_bench() { # binary round threads
  "$1" bench --model "$M" --threads "$3" --prompt-tokens 64 --gen-tokens 32 --repetitions 1 --warmup 1 \
    --format json --copy-mb 0 --quiet 2>/dev/null
}
llama_capped() {
  capped node "$NR/llama.mjs" "$M" 1 tg 8 32 2>/dev/null | emit "$1" capped 1 llama.cpp
}
lesfarm_capped() {
  capped "$LESFARM" generate --model "$M" --prompt "In the beginning God created the heaven and the earth." \
    --mode scheduled --storage direct --expert-budget 20% --format json --max-tokens 33 --threads 1 2>/dev/null |
    emit "$1" capped 1 lesfarm
}

: > "$OUT"
for i in $(seq "$ROUNDS"); do
  PEER_LOAD=$(cut -d' ' -f1 /proc/loadavg)
  export PEER_LOAD
  log "round $i/$ROUNDS $(date -u +%T) load $PEER_LOAD"
  cat "$M" > /dev/null # the resident runs read a warm page cache
  engines=(llama lesfarm)
  [ -n "${BASE:-}" ] && engines+=(base)
  ne=${#engines[@]}
  for t in 1 2; do
    for k in $(seq 0 $((ne - 1))); do # round i starts with engine (i-1) mod ne
      "${engines[$(((i - 1 + k) % ne))]}_resident" "$i" "$t"
    done
  done
  if [ "$CAPPED" = 1 ]; then
    echo 128 > /sys/block/$DEV/queue/read_ahead_kb
    if [ $((i % 2)) = 1 ]; then llama_capped "$i"; lesfarm_capped "$i"
    else lesfarm_capped "$i"; llama_capped "$i"; fi
    echo "$OLD_RA" > /sys/block/$DEV/queue/read_ahead_kb
  fi
done
node "$HERE/summary.mjs" "$OUT" "$M" "$CAP"
