# failures.awk: from a `go test -v` log, print each failed test's own messages (the
# file_test.go:N: lines its t.Error/t.Fatal/t.Log wrote) followed by its --- FAIL line,
# and any panic. `go test -v` announces whose output follows with === RUN/CONT/NAME, so
# the messages are kept per test and printed only for the tests that failed. The race
# detector's reports (the test's own message is only "race detected during execution of
# test") are printed too: the first three, up to 40 lines each.
/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
/^[ \t]+[A-Za-z0-9_.-]+(_test|testing)\.go:[0-9]+: / { if (cur != "") { msgs[cur] = msgs[cur] $0 "\n"; n[cur]++ } ; next }
/^[ \t]*--- FAIL: / {
	name = $3
	printf "%s", tail(name)
	print
	next
}
/^WARNING: DATA RACE/ { if (races++ < 3) { racing = 1; raceLines = 0 } }
racing { print; if (++raceLines >= 40 || /^==================$/) racing = 0; next }
/^panic: / { panicking = 1 }
panicking && printed < 60 { print; printed++ }
function tail(name,    lines, k, i, out, from) {
	if (!(name in msgs)) return ""
	k = split(msgs[name], lines, "\n")
	from = k - 20; if (from < 1) from = 1   # the last 20 messages of a long-logging test
	out = ""
	for (i = from; i <= k; i++) if (lines[i] != "") out = out lines[i] "\n"
	return out
}
