#!/usr/bin/env python3
"""The host's state over a campaign, from the empty loop each round timed.

Usage: tools/campaign/loop-states.py FILE_OR_DIR...

Reads exitlab results files (plain runs and both sides of A/B runs; directories are read
for *.json), takes every round's empty-loop median (`loop_median`, the guest's own timing
of the bare loop just before its samples) of every test, and prints how they spread: the
quantiles of the `loop_overhead` test's at ring 0 (the bare loop itself), and for every test
and ring the share of its rounds whose empty loop is over 1.2 times that test's 10th
percentile over the campaign (the model's host-speed factor, docs/model.md; tests and rings
are taken apart because a batched test's loop is timed per iteration of its batch, and on
a paravirtual host ring 0 is emulated and ring 3 is not). It reads the figures as the
results hold them and filters nothing; it says what the host did, not what a verdict is.
"""
import json
import os
import sys


def files(args):
    for a in args:
        if os.path.isdir(a):
            for root, _, names in os.walk(a):
                for n in sorted(names):
                    if n.endswith(".json"):
                        yield os.path.join(root, n)
        else:
            yield a


def rounds(r):
    """((test, ring), round's empty loop) of every round of both sides."""
    sides = [r.get("tests", [])]
    ab = r.get("ab") or {}
    if ab.get("b_tests"):
        sides.append(ab["b_tests"])
    for tests in sides:
        for t in tests:
            for rd in t.get("rounds") or []:
                loop = rd.get("loop_median")
                if loop:
                    yield (t["name"], t.get("ring")), loop


def quantile(v, p):
    return v[min(len(v) - 1, int(p * len(v)))]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    by_test, nfiles = {}, 0
    for f in files(sys.argv[1:]):
        try:
            with open(f) as fh:
                r = json.load(fh)
        except (OSError, ValueError):
            continue
        if "tests" not in r:
            continue
        nfiles += 1
        for name, loop in rounds(r):
            by_test.setdefault(name, []).append(loop)
    if not by_test:
        sys.exit("loop-states: no rounds with an empty-loop figure")
    total = slow = 0
    for loops in by_test.values():
        loops.sort()
        p10 = quantile(loops, 0.10)
        total += len(loops)
        slow += sum(1 for x in loops if x > 1.2 * p10)
    bare = by_test.get(("loop_overhead", 0))
    if bare:
        print(
            "loop_overhead's empty loop (ring 0) over %d rounds of %d files: p10 %.0f, median %.0f, "
            "p90 %.0f, max %.0f cycles"
            % (len(bare), nfiles, quantile(bare, 0.1), quantile(bare, 0.5), quantile(bare, 0.9), bare[-1])
        )
    print(
        "rounds whose empty loop is over 1.2 x its test's p10: %d of %d (%.1f%%)"
        % (slow, total, 100.0 * slow / total)
    )


if __name__ == "__main__":
    main()
