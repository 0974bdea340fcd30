#!/bin/bash
# make bench/ppl: the perplexity of GGUF files by llama.cpp's
# llama-perplexity and by lesfarm perplexity, on the same text with the
# same windows (issue 31 item 1: a planned file's perplexity against the
# unplanned file's, checked with llama-perplexity). A benchmark, not a test.
#
# llama-perplexity is built once from the llama.cpp source that the pinned
# node-llama-cpp carries (lib.sh), so it is the release bench/peer runs,
# into PEER_DIR/llama-tools-PIN. That needs cmake and a C++ compiler
# (apt-get install cmake g++) and 5-6 minutes on 2 idle cores.
#
#   scripts/bench-peer/ppl.sh REFERENCE.gguf [OTHER.gguf ...]
# Environment: TEXT (docs/les.md), CTX (128 tokens per window), CHUNKS (4
# windows; 0 = all), THREADS (2), PEER_DIR (/tmp/lesfarm-peer), LESFARM (the lesfarm
# binary; default: built from this checkout).
# Both engines use llama.cpp's method (lesfarm perplexity --method
# llama.cpp): windows of CTX tokens, each from an empty cache, the first
# token replaced by BOS when the vocabulary adds one, the second half
# scored. Each file is read once into the page cache before its runs.
# It prints a table: per file its bytes, llama.cpp's ppl and its ±, lesfarm's
# ppl, lesfarm/llama.cpp − 1, and each engine's change from the first file
# (the reference, e.g. the unplanned file at the same size). Results are
# also appended as JSON lines to PEER_DIR/ppl.jsonl. Exit 1 if an engine
# fails on a file.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
LOG_PREFIX=bench/ppl
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
PEER_DIR=${PEER_DIR:-/tmp/lesfarm-peer}
TEXT=${TEXT:-$ROOT/docs/les.md}
CTX=${CTX:-128}
CHUNKS=${CHUNKS:-4}
THREADS=${THREADS:-2}
[ $# -ge 1 ] || { log "usage: make bench/ppl MODELS='REFERENCE.gguf [OTHER.gguf ...]'"; exit 2; }
for m in "$@"; do [ -f "$m" ] || { log "model $m does not exist"; exit 2; }; done
[ -f "$TEXT" ] || { log "TEXT $TEXT does not exist"; exit 2; }
mkdir -p "$PEER_DIR"
PEER_DIR=$(cd "$PEER_DIR" && pwd)

lesfarm_binary

TOOLS=$PEER_DIR/llama-tools-$PIN
LP=$TOOLS/build/bin/llama-perplexity
if [ ! -x "$LP" ]; then
  for t in cmake g++ git; do
    command -v $t > /dev/null || { log "$t is missing: apt-get install cmake g++ git"; exit 2; }
  done
  install "$PEER_DIR/full"
  BUNDLE=$PEER_DIR/full/node_modules/node-llama-cpp/llama/gitRelease.bundle
  log "building llama-perplexity from $BUNDLE into $TOOLS (5-6 minutes on 2 idle cores)"
  rm -rf "$TOOLS"
  git clone -q "$BUNDLE" "$TOOLS" 2> /dev/null
  cmake -S "$TOOLS" -B "$TOOLS/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DBUILD_SHARED_LIBS=OFF > "$TOOLS/cmake.log" 2>&1 || { log "cmake failed: $TOOLS/cmake.log"; exit 1; }
  cmake --build "$TOOLS/build" --target llama-perplexity -j "$(nproc)" > "$TOOLS/build.log" 2>&1 ||
    { log "build failed: $TOOLS/build.log"; exit 1; }
fi

# CHUNKS=0 is every window: llama-perplexity's --chunks -1.
LCHUNKS=$CHUNKS
[ "$CHUNKS" = 0 ] && LCHUNKS=-1
OUT=$PEER_DIR/ppl.jsonl
rows=()
for m in "$@"; do
  cat "$m" > /dev/null
  log "$(basename "$m"): llama-perplexity"
  lo=$("$LP" -m "$m" -f "$TEXT" -c "$CTX" --chunks "$LCHUNKS" -t "$THREADS" 2>&1) ||
    { printf '%s\n' "$lo" | tail -5 >&2; log "llama-perplexity failed on $m"; exit 1; }
  # "Final estimate: PPL = 13735.6143 +/- 1234.5678"
  lppl='' lerr=''
  read -r lppl lerr < <(printf '%s\n' "$lo" | sed -n 's/.*Final estimate: PPL = \([0-9.e+-]*\) +\/- \([0-9.e+-]*\).*/\1 \2/p' | tail -1) || true
  [ -n "$lppl" ] || { printf '%s\n' "$lo" | tail -5 >&2; log "no final estimate in llama-perplexity's output on $m"; exit 1; }
  log "$(basename "$m"): lesfarm perplexity"
  fo=$("$LESFARM" perplexity --model "$m" --file "$TEXT" --method llama.cpp --ctx "$CTX" --chunks "$CHUNKS" \
    --threads "$THREADS" --format json 2> /dev/null) || { log "lesfarm perplexity failed on $m"; exit 1; }
  fppl=$(printf '%s' "$fo" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).ppl))')
  bytes=$(stat -c %s "$m")
  printf '{"model":"%s","bytes":%s,"text":"%s","ctx":%s,"chunks":%s,"llama_ppl":%s,"llama_ppl_err":%s,"lesfarm_ppl":%s,"release":"%s"}\n' \
    "$m" "$bytes" "$TEXT" "$CTX" "$CHUNKS" "$lppl" "$lerr" "$fppl" "$PIN" >> "$OUT"
  rows+=("$(basename "$m") $bytes $lppl $lerr $fppl")
done

echo "llama-perplexity (node-llama-cpp $PIN's llama.cpp) and lesfarm perplexity, $(basename "$TEXT"), $CHUNKS windows of $CTX tokens, $THREADS threads"
echo
echo "| model | bytes | llama.cpp ppl | lesfarm ppl | lesfarm / llama.cpp − 1 | llama.cpp vs first | lesfarm vs first |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}" | awk '
  NR == 1 { l0 = $3; f0 = $5 }
  { printf "| %s | %.0f | %.4f ± %.4f | %.4f | %+.4f%% | %+.3f%% | %+.3f%% |\n", $1, $2, $3, $4, $5, ($5/$3-1)*100, ($3/l0-1)*100, ($5/f0-1)*100 }'
