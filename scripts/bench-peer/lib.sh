# lib.sh: what make bench/peer and make bench/ppl share (sourced, not run).
#
# PIN is the node-llama-cpp release both use: its prebuilt CPU binaries
# are llama.cpp release v0.5.0 (llama/llama.cpp.info.json in the package),
# and the package carries that release's source as a git bundle
# (llama/gitRelease.bundle), which bench/ppl builds its llama-perplexity
# from, so both benchmarks compare against the same llama.cpp.
PIN=3.22.1

log() { echo "$LOG_PREFIX: $*" >&2; }

# install DIR: node-llama-cpp@PIN with only the linux-x64 CPU binaries (no
# GPU packages) in DIR, unless DIR already holds that version.
install() {
  local dir=$1
  if [ "$(node -p "require('$dir/node_modules/node-llama-cpp/package.json').version" 2>/dev/null)" != "$PIN" ]; then
    log "installing node-llama-cpp@$PIN into $dir"
    mkdir -p "$dir"
    echo '{"name":"lesfarm-peer","private":true,"type":"module"}' > "$dir/package.json"
    (cd "$dir" && npm install --no-audit --no-fund --omit=optional --ignore-scripts \
      "node-llama-cpp@$PIN" "@node-llama-cpp/linux-x64@$PIN" >&2)
  fi
}

# lesfarm_binary: LESFARM is the lesfarm binary to run; unless given, it is
# built from the checkout at ROOT into PEER_DIR.
lesfarm_binary() {
  if [ -z "${LESFARM:-}" ]; then
    LESFARM=$PEER_DIR/lesfarm
    log "building lesfarm from $ROOT"
    (cd "$ROOT" && go build -o "$LESFARM" ./cmd/lesfarm)
  fi
}
