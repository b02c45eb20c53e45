#!/bin/sh
# tests/fuzz/ledger.sh [LOG] — sums a fuzzing campaign's ledger (build/fuzz/campaign.log, written
# by tests/fuzz/run.sh, one line per run) per target: runs, executions, seconds and findings.
# `make fuzz-ledger` prints it. Smoke runs (fixed seed) count too: they are executions like any.
log=${1:-build/fuzz/campaign.log}
[ -f "$log" ] || { echo "no ledger at $log (make fuzz writes it)"; exit 0; }
printf "%-16s %6s %14s %10s %9s\n" target runs executions seconds findings
# A line: date, seed, then "fuzz_<name>: N executions in S s (...), corpus C inputs, F findings";
# lines starting with # are remarks.
awk '!/^#/ {
    t = ""; e = ""
    for (i = 1; i <= NF; i++) if ($i ~ /^fuzz_.*:$/) { t = substr($i, 1, length($i) - 1); e = $(i + 1); s = $(i + 4) }
    f = $(NF - 1)
    if (t != "" && e ~ /^[0-9]+$/) { runs[t]++; execs[t] += e; secs[t] += s; found[t] += f }
} END {
    for (t in runs) printf "%-16s %6d %14d %10d %9d\n", t, runs[t], execs[t], secs[t], found[t]
}' "$log" | sort
