#!/bin/sh
# Write docs/errors.md, the catalogue of bad inputs, from the golden tests of
# tests/golden/errors (each case: `about`, `cmd` and the expected output and exit code),
# so that the catalogue shows exactly what the tools print, and ctest checks it is current.
# Usage: scripts/errors_catalogue.sh [OUT]   (default docs/errors.md; - for stdout)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/docs/errors.md}
render() {
  cat <<'HEAD'
# Bad inputs: what each tool says, and its exit status

Every case below is a CLI golden test (`tests/golden/errors/`, run by ctest): the command,
what it printed on stderr (and stdout, where that matters) and the exit status, exactly.
This page is generated from those tests by `scripts/errors_catalogue.sh`, and a test fails
when it falls behind them.

The rules behind them (STYLE.md):

- Exit status 0 on success, **1** for a runtime or data error, **2** for a usage error
  (a bad option or value, with `Try 'TOOL --help' for more information.`); a tool
  ended by a signal has the shell's 128 + signal number.
- One line on stderr, `TOOL: error: WHAT`, located: the file, and the line, byte offset,
  array, tensor, metadata pair or token where the input went wrong.
- Sizes in a header are checked against the file before anything is allocated: a lying
  header is an error, never an out-of-memory.
- Outputs are written to a temporary file beside the target and renamed into place when
  complete; a failed or interrupted run removes the temporary file and leaves no output.
- `--max-memory SIZE` (every tool) turns running out of memory into the same kind of
  error: the tool stops with exit 1 before it holds more than SIZE (heap and large
  tables; memory-mapped input files are not counted).
- In the commands, `$DATA` is `tests/data`.

HEAD
  printf '| case | what | exit |\n|---|---|---|\n'
  for d in "$root"/tests/golden/errors/*/; do
    rc=0
    [ -f "$d/expected.rc" ] && rc=$(cat "$d/expected.rc")
    # A case that runs the tool inside a longer command echoes its status as "exit N".
    echoed=$(cat "$d/expected.stdout" "$d/expected.stderr" 2>/dev/null | sed -n 's/^\(.*: \)\{0,1\}exit \([0-9][0-9]*\)$/\2/p' | tail -n 1)
    [ -n "$echoed" ] && rc=$echoed
    printf '| [%s](#%s) | %s | %s |\n' "$(basename "$d")" "$(basename "$d")" "$(sed 's/|/\\|/g' "$d/about")" "$rc"
  done
  echo
  for d in "$root"/tests/golden/errors/*/; do
    name=$(basename "$d")
    rc=0
    [ -f "$d/expected.rc" ] && rc=$(cat "$d/expected.rc")
    printf '## %s\n\n%s\n\n```sh\n$ %s\n```\n' "$name" "$(cat "$d/about")" "$(cat "$d/cmd")"
    if [ -s "$d/expected.stdout" ]; then
      printf '\nstdout:\n\n```\n'
      head -n 8 "$d/expected.stdout" | cut -c1-100
      [ "$(wc -l < "$d/expected.stdout")" -gt 8 ] && echo "…"
      printf '```\n'
    fi
    if [ -s "$d/expected.stderr" ]; then
      printf '\nstderr:\n\n```\n'
      cat "$d/expected.stderr"
      printf '```\n'
    fi
    printf '\nexit status: **%s**\n\n' "$rc"
  done
}
if [ "$out" = - ]; then render; else render > "$out.tmp" && mv "$out.tmp" "$out"; fi
