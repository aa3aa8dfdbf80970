#!/bin/sh
# Rewrite every golden test's expected files from the current build; review the diff.
# Usage: scripts/update_golden.sh [BUILD_DIR]   (default build/release)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/${1:-build/release}/bin"
for case_dir in "$root"/tests/golden/*/*/; do
  UPDATE_GOLDEN=1 "$root/scripts/run_golden.sh" "${case_dir%/}" "$bin"
done
