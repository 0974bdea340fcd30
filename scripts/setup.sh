#!/usr/bin/env bash
# Installs the system packages lesfarm's tests and embedded defaults need:
# PostgreSQL server binaries (the coordinator and the test harness start a
# local cluster from them) and curl (README's Using it block, TestREADME). Optional: qemu-user (arm64 tests), chromium
# (dashboard browser test). Idempotent; as non-root it prints what to install.
set -euo pipefail

need=()
have_pg() {
  command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}
have_pg || need+=(postgresql)
command -v curl >/dev/null 2>&1 || need+=(curl) # README's Using it block waits for the coordinator with it (TestREADME)
if [ "${LESFARM_SETUP_ARM64:-0}" = 1 ]; then
  command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
fi
if [ "${LESFARM_SETUP_BROWSER:-0}" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi

if [ ${#need[@]} -eq 0 ]; then
  echo "setup: system dependencies present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing ${need[*]}. Install them, e.g.:"
  echo "  sudo apt-get install -y ${need[*]}      # Debian/Ubuntu"
  echo "  brew install postgresql@16               # macOS"
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: missing ${need[*]} and no apt-get here; install them with your package manager" >&2
  exit 1
fi
echo "setup: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
