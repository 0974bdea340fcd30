#!/usr/bin/env bash
# nofma.sh: fails when the arm64 build fuses a float multiply and add (an
# FMADD, FMSUB, FNMADD or FNMSUB in Go-compiled code) anywhere in the
# module. In runtime/: the packages that compute a model's numbers
# (tensor, quant, model, moe, sample, generate), the metrics every side
# computes alike (stat, routing), and the runtime's decisions and figures
# around them: the expert store's policies and device clock (expert),
# the speculative controller (spec) and bench's derived figures (bench),
# so an arm64 host emulating a phone schedules the same reads and reports
# the same device times as an amd64 one.
# ggml rounds each product before adding it, and so must lesfarm, or an
# arm64 phone decodes other tokens than an amd64 host from the same file.
# In coordinator/: its statistics, the regression detector (regress and
# its monitor), the A/B gate (abtest) and the store's downsampled series
# (store), and dispatch's rate limiter, so an arm64 coordinator raises the
# same alerts and passes the same builds as an amd64 one.
# Go fuses a*b+c on arm64 (and on amd64 from GOAMD64=v3) unless an
# explicit conversion rounds the product: write c + float32(a*b) (or
# float64(a*b), as the coordinator's statistics do).
# Assembly kernels are not checked (their FMLAs are deliberate and tested
# bit for bit against the generic kernels).
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -o "$out/lesfarm" ./cmd/lesfarm
go tool objdump "$out/lesfarm" >"$out/dis"
bad=$(awk '/^TEXT /{fn=$2; asm=($0 ~ /\.s$/)} /\t(FMADD|FMSUB|FNMADD|FNMSUB)[SD]? /{if (!asm) print fn, $1}' "$out/dis" |
  grep -E 'lesfarm/lesfarm/' || true)
if [ -n "$bad" ]; then
  echo "nofma: fused multiply-adds in the arm64 build (round the product: c + float32(a*b)):"
  echo "$bad" | sort | uniq -c
  exit 1
fi
