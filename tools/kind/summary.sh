#!/usr/bin/env bash
# Summarises a `go test -v` log of the e2e suite: how many tests ran, passed, failed and
# were skipped (top-level tests; subtests counted apart), and every skip with its reason —
# the last line the test logged before its `--- SKIP` (go test -v streams t.Skip's message
# just before it), so a test that passes vacuously on a cluster shows up by name.
#
#   summary.sh LABEL LOG
set -euo pipefail
label=$1 log=$2
awk -v label="$label" '
  /^=== (RUN|CONT|PAUSE|NAME)/ { cur = $3 }
  /^=== RUN / && $3 !~ /\// { started[$3] = 1 }
  /^--- (PASS|FAIL|SKIP): / { delete started[$3] }
  /^ +[A-Za-z0-9_]+\.go:[0-9]+: / && cur != "" { m = $0; sub(/^ +/, "", m); msg[cur] = m }
  /^--- PASS: / { pass++ } /^--- FAIL: / { fail++ } /^--- SKIP: / { skip++ }
  /^ +--- PASS: / { spass++ } /^ +--- FAIL: / { sfail++ } /^ +--- SKIP: / { sskip++ }
  /^ *--- SKIP: / { n = $3; skipped[++ns] = n ": " (n in msg ? msg[n] : "(no reason logged)") }
  END {
    printf "%s: %d tests ran (%d passed, %d failed), %d skipped; subtests: %d passed, %d failed, %d skipped\n",
      label, pass + fail, pass + 0, fail + 0, skip + 0, spass + 0, sfail + 0, sskip + 0
    for (i = 1; i <= ns; i++) printf "%s: skipped %s\n", label, skipped[i]
    for (n in started) printf "%s: did not finish %s (killed, timed out or panicked)\n", label, n
  }' "$log"
