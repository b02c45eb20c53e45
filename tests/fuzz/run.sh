#!/bin/sh
# tests/fuzz/run.sh BINARY SECONDS MAX_LEN ARTIFACTS REGRESSIONS CORPUS... — runs one libFuzzer
# target (tests/fuzz/rules.mk): first every input of REGRESSIONS once (inputs that found bugs
# before), then fuzzing for SECONDS from the CORPUS directories (new inputs go to the first).
# Prints one line: executions, speed, corpus size, findings. Exits non-zero on any finding; the
# input is then in ARTIFACTS, and the whole log next to BINARY (BINARY.log).
# FUZZ_SEED in the environment fixes libFuzzer's seed (make fuzz-smoke: a run in `make test` then
# mutates the same way every time, from a fresh clone's empty working corpus); unset, each run
# draws its own (make fuzz: a campaign wants new paths every time).
set -u
bin=$1 secs=$2 maxlen=$3 art=$4 reg=$5
shift 5
name=$(basename "$bin")
log=$bin.log
opts="-rss_limit_mb=2048 -timeout=10 -max_len=$maxlen -artifact_prefix=$art/ -print_final_stats=1"
[ -n "${FUZZ_SEED:-}" ] && opts="$opts -seed=$FUZZ_SEED"
mkdir -p "$art" "$1"

count_findings() { ls "$art" 2>/dev/null | grep -cE '^(crash|leak|timeout|oom)-' ; }
before=$(count_findings)

if [ -d "$reg" ] && [ -n "$(ls -A "$reg" 2>/dev/null)" ]; then
    n=$(ls "$reg" | wc -l)
    # shellcheck disable=SC2086
    if ! "$bin" $opts "$reg"/* >"$log" 2>&1; then
        echo "$name: FAILED replaying $reg ($n inputs); log: $log"
        grep -E 'ERROR|runtime error|contract broken|Running:' "$log" | tail -20
        exit 1
    fi
    echo "$name: replayed $n regression inputs from $reg: ok"
fi

start=$(date +%s)
# shellcheck disable=SC2086
"$bin" $opts -max_total_time="$secs" "$@" >"$log" 2>&1
rc=$?
secs=$(( $(date +%s) - start )) # what it ran: a finding ends a run early
final_stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
execs=$(final_stat number_of_executed_units)
speed=$(final_stat average_exec_per_sec)
rss=$(final_stat peak_rss_mb)
corpus=$(ls "$1" | wc -l)
found=$(( $(count_findings) - before ))
[ "$rc" -ne 0 ] && [ "$found" -eq 0 ] && found=1
summary="$name: ${execs:-?} executions in ${secs} s (${speed:-?} exec/s, peak RSS ${rss:-?} MB), corpus $corpus inputs, $found findings"
echo "$summary"
# The campaign's ledger, next to the binaries: one line per run (seeded smoke runs included, marked),
# so that a campaign spread over many runs adds up (tests/fuzz/ledger.sh sums it per target).
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) seed=${FUZZ_SEED:-random} $summary" >>"$(dirname "$bin")/campaign.log"
if [ "$rc" -ne 0 ]; then
    echo "$name: FAILED (exit $rc); log: $log; inputs: $art"
    grep -E 'ERROR|runtime error|contract broken|SUMMARY|Test unit written' "$log" | tail -20
    exit 1
fi
