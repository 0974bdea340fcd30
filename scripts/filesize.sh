#!/usr/bin/env bash
# filesize.sh: fails when a tracked Go, JavaScript or assembly file (not
# generated, not vendored) is over MAX lines (default 600) without saying
# why at its top: a comment within its first 15 lines containing
# "long file:" and the reason.
set -euo pipefail
max=${MAX:-600}
bad=0
while IFS= read -r f; do
  n=$(wc -l <"$f")
  [ "$n" -le "$max" ] && continue
  head -15 "$f" | grep -q 'Code generated .* DO NOT EDIT' && continue
  head -15 "$f" | grep -qi 'long file:' && continue
  echo "$f: $n lines (over $max); split it or state why at its top (// long file: REASON)"
  bad=1
done < <(git ls-files '*.go' '*.js' '*.s' | grep -v '/vendor/')
exit $bad
