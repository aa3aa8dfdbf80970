#!/bin/sh
# Run one CLI golden test case: tests/golden/<tool>/<case>/
#   cmd              one shell command line; $DATA is tests/data, the tools are on PATH
#   stdin            (optional) fed to the command; otherwise stdin is empty
#   expected.stdout  compared byte for byte with what the command printed
#   expected.stderr  (optional) compared with stderr (the update writes it always)
#   expected.rc      (optional) the exit status; 0 when absent
# With UPDATE_GOLDEN=1 the expected files are rewritten from the actual output.
# Usage: run_golden.sh CASE_DIR BIN_DIR
set -u
case_dir=$(cd "$1" && pwd)
bin_dir=$(cd "$2" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PATH="$bin_dir:$PATH" DATA="$root/tests/data" WORK="$work" LC_ALL=C
stdin=/dev/null
[ -f "$case_dir/stdin" ] && stdin="$case_dir/stdin"
(cd "$work" && sh -c "$(cat "$case_dir/cmd")" <"$stdin" >"$work/.stdout" 2>"$work/.stderr")
rc=$?
if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
  cp "$work/.stdout" "$case_dir/expected.stdout"
  cp "$work/.stderr" "$case_dir/expected.stderr"
  if [ "$rc" != 0 ]; then echo "$rc" >"$case_dir/expected.rc"; else rm -f "$case_dir/expected.rc"; fi
  echo "updated $case_dir"
  exit 0
fi
fail=0
want_rc=0
[ -f "$case_dir/expected.rc" ] && want_rc=$(cat "$case_dir/expected.rc")
if [ "$rc" != "$want_rc" ]; then
  echo "exit status $rc, expected $want_rc"; fail=1
fi
if ! cmp -s "$work/.stdout" "$case_dir/expected.stdout"; then
  echo "stdout differs:"; diff "$case_dir/expected.stdout" "$work/.stdout" | head -20; fail=1
fi
if [ -f "$case_dir/expected.stderr" ] && ! cmp -s "$work/.stderr" "$case_dir/expected.stderr"; then
  echo "stderr differs:"; diff "$case_dir/expected.stderr" "$work/.stderr" | head -20; fail=1
fi
if [ "$fail" = 1 ]; then
  echo "command: $(cat "$case_dir/cmd")"
  echo "stderr was:"; head -20 "$work/.stderr"
fi
exit $fail
