#!/usr/bin/env bash
# The known-answer suite of the statistical model (docs/model.md, "Acceptance"): runs
# exitlab's designs on this host and tallies, with the model's own code
# (crates/results/examples/tally.rs), the gate's false alarms, the known answer's
# coverage and detection, equivalence, doctored copies, wall time and steadiness.
#
# Usage (root, /dev/kvm; from the checkout, after `cargo build --release` and
# `cargo build --release -p exitlab-results --example tally`):
#   tools/campaign/acceptance.sh OUTDIR [--load] [--small] [PART...]
# PART: ab-aa ab-known kernel-known runs screen doctored wall (default: all of them).
# --load: a CPU hog (a shell spin loop) on the last CPU for the whole campaign.
# --small: a few of each, for CI (it checks the suite runs end to end, not the rates).
# AB_RUNS, KNOWN_RUNS, RUN_SETS, WALL_RUNS in the environment override the sizes.
# Every part checks that its tally compared as many pairs as it ran (exit 1 if not).
# Every command it runs and every tally line go to OUTDIR/log.txt; OUTDIR/summary.md
# gets one line per part.
set -euo pipefail
cd "$(dirname "$0")/../.."
EXITLAB=${EXITLAB:-target/release/exitlab}
TALLY=${TALLY:-target/release/examples/tally}

out=${1:?usage: acceptance.sh OUTDIR [--load] [--small] [PART...]}
shift
load=0
small=0
parts=()
for a in "$@"; do
    case $a in
        --load) load=1 ;;
        --small) small=1 ;;
        *) parts+=("$a") ;;
    esac
done
[ ${#parts[@]} -gt 0 ] || parts=(ab-aa ab-known kernel-known runs screen doctored wall)
mkdir -p "$out"
log=$out/log.txt
summary=$out/summary.md
: >"$summary"

# Counts: the acceptance suite's sizes, or --small's.
if [ "$small" = 1 ]; then
    d_ab=2 d_known=2 d_sets=2 d_wall=2 AB_BUDGET=(--budget 3)
else
    d_ab=40 d_known=20 d_sets=20 d_wall=5 AB_BUDGET=()
fi
AB_RUNS=${AB_RUNS:-$d_ab} KNOWN_RUNS=${KNOWN_RUNS:-$d_known} RUN_SETS=${RUN_SETS:-$d_sets} WALL_RUNS=${WALL_RUNS:-$d_wall}

say() { echo "$*" | tee -a "$log" >&2; }
run() {
    say "+ $*"
    local rc=0
    "$@" >>"$log" 2>&1 || rc=$?
    # 0 gate passed, 4 gate fired, 12 no verdict: all are outcomes to tally.
    case $rc in 0 | 4 | 12) ;; *) say "exit $rc"; return "$rc" ;; esac
}
tally() { "$TALLY" "$@" | tee -a "$log" | grep '^summary' ; }
# `record LABEL N TALLY-ARGS...`: tallies, checks that the tally compared N pairs (the
# campaign stops with exit 1 if not: a file went missing or was not read), and writes
# LABEL and the tally's summary to the summary file.
record() {
    local label=$1 n=$2 line got
    shift 2
    line=$(tally "$@")
    got=$(sed -n 's/.*comparisons \([0-9]*\);.*/\1/p' <<<"$line")
    if [ "$got" != "$n" ]; then
        say "$label: the tally compared ${got:-nothing} where $n comparisons were run: $line"
        exit 1
    fi
    echo "$label: $line" >>"$summary"
}

hog=
if [ "$load" = 1 ]; then
    cpu=$(($(nproc) - 1))
    taskset -c "$cpu" sh -c 'while :; do :; done' &
    hog=$!
    trap 'kill $hog 2>/dev/null' EXIT
    say "load: a spin loop on CPU $cpu (pid $hog)"
fi
say "campaign $(date -u +%FT%TZ) on $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), exitlab $("$EXITLAB" --version)"

# The known answer: 2.5 % of a test's figure on this host at ring $2, from a plain run:
# inl_from_user's for the userspace exits, cpuid's for the kernel-handled ones.
known_cycles() {
    local f=$out/probe-ring$2.json
    [ -f "$f" ] || run "$EXITLAB" bench --tests inl_from_user,cpuid --ring "$2" --no-overhead --quiet --json "$f"
    python3 - "$f" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = next(t for t in r["tests"] if t["name"] == sys.argv[2])
print(max(1, round(0.025 * t["net_median_cycles"])))
PY
}
# Seconds since $1 (from `date +%s%N`), one decimal.
since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }
USER_TESTS=inl_from_user,outl_to_user,mmio_read_user,mmio_write_user,rdmsr_user,wrmsr_user,hlt
# The default suite's tests, named: without --tests an A/B run takes only the tests its
# knob can affect, and the known-answer runs must also show that the others do not move.
suite_tests() {
    local f=$out/probe-suite.json
    [ -f "$f" ] || run "$EXITLAB" bench --rounds 1 --no-overhead --quiet --json "$f"
    python3 -c 'import json, sys; print(",".join(t["name"] for t in json.load(open(sys.argv[1]))["tests"]))' "$f"
}

for part in "${parts[@]}"; do
    case $part in
    ab-aa)
        # A/A, bench --ab's default design: the gate's false alarms and equivalence.
        d=$out/ab-aa; mkdir -p "$d"
        for i in $(seq "$AB_RUNS"); do
            run "$EXITLAB" bench --ab warmup=200,201 "${AB_BUDGET[@]}" --quiet --json "$d/$i.json"
        done
        record ab-aa "$AB_RUNS" ab "$d"/*.json
        ;;
    ab-known)
        # Known answer, A/B: inject-cycles=0,N with N 2.5 % of a userspace exit.
        n=$(known_cycles inl_from_user 0)
        d=$out/ab-known-$n; mkdir -p "$d"
        for i in $(seq "$KNOWN_RUNS"); do
            run "$EXITLAB" bench --tests "$(suite_tests)" --ab "inject-cycles=0,$n" "${AB_BUDGET[@]}" --quiet --json "$d/$i.json"
        done
        record "ab-known (N=$n cycles)" "$KNOWN_RUNS" ab --truth-cycles "$n" --tests "$USER_TESTS" "$d"/*.json
        ;;
    kernel-known)
        # Known answer for kernel-handled tests: guest-cycles=0,N at ring 3 (on kvm_pvm
        # the guest's ring 0 is emulated), N 2.5 % of cpuid's figure there.
        n=$(known_cycles cpuid 3)
        d=$out/kernel-known-$n; mkdir -p "$d"
        kernel=cpuid,cpuid_0xd,inl_from_kernel,outl_to_kernel,mmio_write_ioeventfd,rd_tsc_adjust_msr,wr_tsc_adjust_msr
        for i in $(seq "$KNOWN_RUNS"); do
            run "$EXITLAB" bench --ring 3 --tests "$kernel" --ab "guest-cycles=0,$n" "${AB_BUDGET[@]}" --quiet --json "$d/$i.json"
        done
        record "kernel-known (N=$n guest cycles, ring 3)" "$KNOWN_RUNS" ab --truth-cycles "$n" --tests "$kernel" "$d"/*.json
        ;;
    runs)
        # Runs, 3 a side, not interleaved: A/A; the known answer (N, 2.5 %) and a 5 %
        # change (2N) injected into side B's runs.
        n=$(known_cycles inl_from_user 0)
        d=$out/runs; mkdir -p "$d"
        pairs_aa=() pairs_n=() pairs_2n=()
        for i in $(seq "$RUN_SETS"); do
            for side in a b n 2n; do
                inject=0
                case $side in n) inject=$n ;; 2n) inject=$((2 * n)) ;; esac
                [ -d "$d/$i-$side" ] || run "$EXITLAB" bench --runs 3 --inject-cycles "$inject" --quiet --json "$d/$i-$side"
            done
            pairs_aa+=("$d/$i-a" "$d/$i-b")
            pairs_n+=("$d/$i-a" "$d/$i-n")
            pairs_2n+=("$d/$i-a" "$d/$i-2n")
        done
        record "runs A/A" "$RUN_SETS" runs "${pairs_aa[@]}"
        record "runs known (N=$n)" "$RUN_SETS" runs --truth-cycles "$n" --tests "$USER_TESTS" "${pairs_n[@]}"
        record "runs 5% (2N=$((2 * n)))" "$RUN_SETS" runs --truth-cycles $((2 * n)) --tests "$USER_TESTS" "${pairs_2n[@]}"
        ;;
    screen)
        # Two single files, A/A: how often a screen would have flagged an unchanged test
        # (it does not gate: the rate says why). Uses the runs part's files.
        d=$out/runs
        pairs=()
        for i in $(seq "$RUN_SETS"); do
            for k in 01 02 03; do pairs+=("$d/$i-a/run-$k.json" "$d/$i-b/run-$k.json"); done
        done
        record "screen A/A" $((3 * RUN_SETS)) screen "${pairs[@]}"
        ;;
    doctored)
        # Doctored copies of the runs part's side B (the exit figure scaled, the empty
        # loop kept): +5 % inl_from_user and +3 % cpuid, and +30 % both.
        d=$out/runs
        for pct in 5 30; do
            pairs=()
            for i in $(seq "$RUN_SETS"); do
                doc=$out/doctored-$pct/$i; mkdir -p "$doc"
                for f in "$d/$i-b"/*.json; do
                    if [ "$pct" = 5 ]; then scale=(inl_from_user=5 cpuid=3); else scale=(inl_from_user=30 cpuid=30); fi
                    "$TALLY" doctor "$f" "$doc/$(basename "$f")" "${scale[@]}"
                done
                pairs+=("$d/$i-a" "$doc")
            done
            if [ "$pct" = 5 ]; then truth=inl_from_user=5,cpuid=3; else truth=inl_from_user=30,cpuid=30; fi
            record "doctored +$pct% (runs, 3 a side)" "$RUN_SETS" runs --truth "$truth" "${pairs[@]}"
        done
        # And the A/B design: side B of the A/A runs doctored by +30 %.
        abdoc=()
        for f in "$out"/ab-aa/*.json; do
            [ -f "$f" ] || continue
            g=$out/doctored-30/ab-$(basename "$f")
            "$TALLY" doctor "$f" "$g" inl_from_user=30 cpuid=30
            abdoc+=("$g")
        done
        [ ${#abdoc[@]} -eq 0 ] || record "doctored +30% (A/B)" ${#abdoc[@]} ab --truth inl_from_user=30,cpuid=30 "${abdoc[@]}"
        ;;
    wall)
        # Wall time of the default bench and the default --ab, and the central figure's
        # spread over consecutive default runs.
        d=$out/wall; mkdir -p "$d"
        for i in $(seq "$WALL_RUNS"); do
            s=$(date +%s%N)
            run "$EXITLAB" bench --quiet --json "$d/bench-$i.json"
            echo "bench $i: $(since "$s") s" | tee -a "$log" >>"$summary"
        done
        s=$(date +%s%N)
        run "$EXITLAB" bench --ab warmup=200,201 --quiet --json "$d/ab.json"
        echo "bench --ab: $(since "$s") s" | tee -a "$log" >>"$summary"
        "$TALLY" spread "$d"/bench-*.json | tee -a "$log" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
worst = max(rows, key=lambda r: r["spread_pct"])
print("spread over %d default runs: worst %s %.1f%%, median %.1f%%" % (worst["runs"], worst["test"], worst["spread_pct"], sorted(r["spread_pct"] for r in rows)[len(rows) // 2]))
' >>"$summary"
        ;;
    *) say "unknown part $part"; exit 2 ;;
    esac
done
cat "$summary"
