#!/bin/bash
# llama.cpp's mmap against lesfarm naive under one memory cap (docs/les.md,
# "Against llama.cpp's mmap"). Per round: llama.cpp uncapped with the file in
# the page cache (its compute per token), llama.cpp capped, lesfarm naive
# capped, all at read_ahead_kb 128. Needs root (cgroup v1 memory controller,
# /sys/block), node and node-llama-cpp 3.22.1 installed in LLAMA_DIR with its
# AVX2-and-up CPU variants moved out of bins/linux-x64 (they repack Q4_K into
# anonymous memory and are killed at the cap).
#   scripts/llama-mmap/compare.sh MODEL.gguf LESFARM_BINARY CAP_BYTES [ROUNDS]
set -eu
M=$1 B=$2 CAP=$3 ROUNDS=${4:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
LLAMA_DIR=${LLAMA_DIR:-/tmp/twin-llama}
DEV=${DEV:-vda}
CG=/sys/fs/cgroup/memory/lesfarm-llama-cmp
cp "$HERE/bench.mjs" "$LLAMA_DIR/lesfarm-bench.mjs"
OLD=$(cat /sys/block/$DEV/queue/read_ahead_kb)
echo 128 > /sys/block/$DEV/queue/read_ahead_kb
trap 'echo $OLD > /sys/block/$DEV/queue/read_ahead_kb' EXIT
capped() {
  local out=$1; shift
  mkdir -p $CG
  echo $CAP > $CG/memory.limit_in_bytes
  echo $CAP > $CG/memory.memsw.limit_in_bytes
  dd if="$M" iflag=nocache count=0 status=none
  sh -c "echo \$\$ > $CG/cgroup.procs; exec \"\$@\"" sh "$@" > $out 2> $out.err || echo "$out: exit $?"
  echo "$out: max_usage $(cat $CG/memory.max_usage_in_bytes) load $(cut -d' ' -f1 /proc/loadavg)"
  rmdir $CG
}
for i in $(seq $ROUNDS); do
  echo "round $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  cat "$M" > /dev/null
  node "$LLAMA_DIR/lesfarm-bench.mjs" "$M" 32 1 > llama-warm$i.json && cat llama-warm$i.json
  capped llama-capped$i.json node "$LLAMA_DIR/lesfarm-bench.mjs" "$M" 32 1
  cat llama-capped$i.json
  capped naive$i.json "$B" generate --model "$M" --prompt "In the beginning God created the heaven and the earth." \
    --mode naive --expert-budget 20% --storage direct --format json --max-tokens 33 --threads 1
  tail -c 330 naive$i.json; echo
done
