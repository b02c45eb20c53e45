#!/bin/sh
# bench/callgrind.sh — instructions per call of each dispatch path, counted by callgrind; or,
# given bench_nms_cg, of the CPU nms on bench_nms.py's problems (bench/bench_nms_cg.c).
#
#   bench/callgrind.sh [path/to/bench_dispatch] [iters]        (make bench-callgrind runs it)
#   bench/callgrind.sh build/bench_nms_cg [calls]              (make bench-nms-callgrind)
#
# Callgrind counts every instruction the process executes (start-up, loader, registration), so
# for each path this runs the bench twice, with N calls and with 0, and reports
#     instructions/call = (Ir(N) - Ir(0)) / N
# which leaves only the loop: the call itself plus a few instructions of loop overhead, which
# the "empty" row shows and which cancels in the "- (a)" column. LD_BIND_NOW keeps lazy PLT
# binding (a one-off cost of the first call) out of the N run.
set -eu

BIN=${1:-build/bench_dispatch}
case $BIN in
*bench_nms_cg) FLAG=--case ITERS=${2:-3} ;;
*) FLAG=--variant ITERS=${2:-100000} ;;
esac

if ! command -v valgrind >/dev/null 2>&1; then
    echo "callgrind.sh: valgrind is not installed (apt-get install valgrind)" >&2
    exit 1
fi
if [ ! -x "$BIN" ]; then
    echo "callgrind.sh: no bench binary at $BIN (make $BIN)" >&2
    exit 1
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Total Ir of one run: callgrind writes it as "summary: N" (or "totals: N") in its output file.
ir_of() {
    out="$TMP/cg.$1.$2"
    LD_BIND_NOW=1 valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$BIN" $FLAG "$1" --iters "$2" >"$TMP/log.$1.$2" 2>&1 || {
        echo "callgrind.sh: '$BIN $FLAG $1 --iters $2' failed:" >&2
        cat "$TMP/log.$1.$2" >&2
        exit 1
    }
    sed -n -e 's/^summary: *\([0-9]*\).*/\1/p' -e 's/^totals: *\([0-9]*\).*/\1/p' "$out" | head -n 1
}

per_call() {
    full=$(ir_of "$1" "$ITERS")
    base=$(ir_of "$1" 0)
    # awk for the division: POSIX sh has integer arithmetic only.
    awk -v f="$full" -v b="$base" -v n="$ITERS" 'BEGIN { printf "%.1f", (f - b) / n }'
}

if [ "$FLAG" = --case ]; then
    echo "instructions per nms call (valgrind --tool=callgrind, $ITERS calls, minus a 0-call run)"
    for c in 1k 10k clustered batched; do
        printf '%-10s %12s   %s\n' "$c" "$(per_call "$c")" "$(grep kept "$TMP/log.$c.$ITERS")"
    done
    exit 0
fi

echo "instructions per call (valgrind --tool=callgrind, $ITERS calls, minus a 0-call run)"
printf '%-40s %12s %10s\n' "path" "instr/call" "- (a)"
empty=$(per_call empty)
a=$(per_call a)
printf '%-40s %12s %10s\n' "empty loop (loop overhead only)" "$empty" "-"
for v in a b c0 c d; do
    case $v in
    a) label="(a) direct call (volatile fn ptr)"; n=$a ;;
    b) label="(b) DK_DISPATCH_DEVICE_IMPL"; n=$(per_call b) ;;
    c0) label="(c0) typed entry, op without output"; n=$(per_call c0); c0=$n ;;
    c) label="(c) typed entry dk_bench_nop()"; n=$(per_call c) ;;
    d) label="(d) dk_op_call_boxed, stack per call"; n=$(per_call d) ;;
    esac
    diff=$(awk -v x="$n" -v y="$a" 'BEGIN { printf "%+.1f", x - y }')
    printf '%-40s %12s %10s\n' "$label" "$n" "$diff"
    [ "$v" = c0 ] && c0_diff=$diff
    [ "$v" = c ] && alias=$(awk -v x="$n" -v y="$c0" 'BEGIN { printf "%+.1f", x - y }')
done
verdict=$(awk -v d="$c0_diff" 'BEGIN { print (d + 0 <= 40) ? "met" : "MISSED" }')
echo "target: dispatch, (c0) - (a) <= 40 instructions: $verdict ($c0_diff)"
echo "the aliasing check of one output (Note [Aliasing]), (c) - (c0): $alias instructions"
