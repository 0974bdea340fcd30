#!/usr/bin/env bash
# Phones in CI (called by .ci/run, as root on Debian):
#   1. cross-builds: android/arm64 and linux/arm64 binaries, ios/arm64 agent library;
#   2. gomobile bindings of agent/mobile for Java and Objective-C, which must
#      not skip any exported API (gobind reports unsupported API as
#      "// skipped " comments instead of failing);
#   3. the binaries and the runtime's arm64 kernels run under qemu-aarch64:
#      the runtime conformance tests and the agent's unit tests for GOARCH=arm64;
#   4. the arm64 binary (under qemu) scores a synthesized qwen3moe and
#      qwen35moe with exactly the host binary's perplexity, so a phone
#      decodes what the host decodes from the same file.
# Run it from anywhere: bash .ci/mobile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
export DEBIAN_FRONTEND=noninteractive
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

step() { printf '\n== mobile: %s\n' "$*"; }
fail() { printf 'mobile: FAIL: %s\n' "$*" >&2; exit 1; }
as_root_install() {
  [ "$(id -u)" = 0 ] || fail "$1 is missing and installing it needs root: apt-get install -y $1"
  apt-get install -y -qq "$1" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$1" >/dev/null; }
}

step "cross-build android/arm64 (CGO_ENABLED=0)"
GOOS=android GOARCH=arm64 CGO_ENABLED=0 go build -o "$out/lesfarm-android-arm64" ./cmd/lesfarm
step "cross-build linux/arm64"
GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -o "$out/lesfarm-linux-arm64" ./cmd/lesfarm
step "cross-build ios/arm64 library ./agent/mobile/..."
GOOS=ios GOARCH=arm64 CGO_ENABLED=0 go build ./agent/mobile/...

step "gobind (version pinned by go.mod)"
ver=$(go list -m -f '{{.Version}}' golang.org/x/mobile)
gobind="$(go env GOPATH)/bin/gobind"
if ! [ -x "$gobind" ] || ! go version -m "$gobind" | grep -q "golang.org/x/mobile[[:space:]]*$ver"; then
  go install "golang.org/x/mobile/cmd/gobind@$ver"
fi
for lang in java objc; do
  "$gobind" -lang=go,$lang -outdir "$out/bind-$lang" ./agent/mobile
  if grep -rn '// skipped ' "$out/bind-$lang"; then
    fail "gobind -lang=go,$lang skipped exported API of agent/mobile (lines above): use gobind-supported types only"
  fi
done
grep -q 'public static native Agent start(String configJSON, Listener listener)' "$out/bind-java/java/mobile/Mobile.java" \
  || fail "Java binding lacks Mobile.start(String, Listener)"
grep -q 'MobileStart(NSString\* _Nullable configJSON, id<MobileListener>' "$out/bind-objc/src/gobind/Mobile.objc.h" \
  || fail "Objective-C binding lacks MobileStart(configJSON, listener)"
echo "bindings: java and objc generated, no skipped API"

step "qemu-aarch64"
command -v qemu-aarch64 >/dev/null || as_root_install qemu-user
qemu-aarch64 "$out/lesfarm-linux-arm64" version
qemu-aarch64 "$out/lesfarm-linux-arm64" agent --print-fingerprint --cache-dir "$out/fp" >/dev/null
# Android's linker64 is bionic's; for a static Go PIE, glibc's loader at the
# same path runs it under qemu (libc6-arm64-cross provides it).
ld=/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1
[ -e "$ld" ] || as_root_install libc6-arm64-cross
mkdir -p "$out/android-root/system/bin"
ln -sf "$ld" "$out/android-root/system/bin/linker64"
qemu-aarch64 -L "$out/android-root" "$out/lesfarm-android-arm64" version

step "runtime conformance and agent tests for GOARCH=arm64 under qemu (about 20x slower than native)"
GOOS=linux GOARCH=arm64 go test -count=1 -timeout 30m -exec qemu-aarch64 ./runtime/tensor/...
GOOS=linux GOARCH=arm64 go test -count=1 -timeout 30m -exec qemu-aarch64 -run 'Conformance' ./runtime/model/
GOOS=linux GOARCH=arm64 go test -count=1 -timeout 30m -exec qemu-aarch64 ./agent/device/ ./agent/artifact/ ./agent/telemetry/

step "arm64 and amd64 score the same file with the same bits (no fused multiply-adds: scripts/nofma.sh)"
go build -o "$out/lesfarm-host" ./cmd/lesfarm
head -c 6000 docs/les.md >"$out/text.txt"
# score MODEL CMD...: CMD's perplexity and mean NLL of MODEL on the text
score() {
  local model=$1; shift
  "$@" perplexity --model "$model" --file "$out/text.txt" --ctx 128 --chunks 4 --threads 1 --format json | grep -E '"(ppl|mean_nll)"'
}
for arch in qwen3moe qwen35moe; do
  "$out/lesfarm-host" synth -o "$out/$arch.gguf" --arch "$arch" --layers 4 --hidden 256 --vocab 4000 >/dev/null 2>&1 || fail "synth $arch"
  host=$(score "$out/$arch.gguf" "$out/lesfarm-host")
  arm=$(score "$out/$arch.gguf" qemu-aarch64 "$out/lesfarm-linux-arm64")
  [ "$host" = "$arm" ] || fail "$arch: amd64 and arm64 perplexities differ: $host vs $arm"
  echo "$arch: $(echo "$host" | tr -d ' \n') on both"
done

printf '\n== mobile: OK\n'
