#!/usr/bin/env bash
# Regenerates docs/report.png, the README's screenshot of the HTML report
# (`exitlab report before.json after.json -o report.html`), the way anyone can repeat it:
#
#   bash tools/report-png.sh [OUT.png]        (from the checkout; needs /dev/kvm and chromium)
#
# 1. two short runs of the same tests on this host, "before" and "after" (so the page has
#    its comparison table, two series in every plot, and the phases of userspace exits);
# 2. the report of the two, as the README shows it;
# 3. the page's height as Chromium lays it out (measured in a copy with a one-line script:
#    the report itself has none), then a screenshot of the whole page at that height, so
#    nothing is cut off, phases chart included.
#
# EXITLAB=path runs another exitlab binary (default: the release build, built first).
# Debian's `chromium` package provides the browser (.ci/run installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/report.png}
if [ -z "${EXITLAB:-}" ]; then
    cargo build --release --quiet
    EXITLAB=target/release/exitlab
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
EXITLAB=$(realpath "$EXITLAB")
out=$(realpath -m "$out")
# In the scratch directory, so that the page names the files as the README does.
cd "$dir"
tests=cpuid,inl_from_kernel,inl_from_user,outl_to_user,mmio_read_user
for run in before after; do
    "$EXITLAB" bench --tests "$tests" --samples 1000 --rounds 6 --no-overhead --quiet \
        --json "$run.json" >/dev/null
done
"$EXITLAB" report before.json after.json -o report.html

width=1200
chrome=(chromium --headless --no-sandbox --disable-gpu --hide-scrollbars
    --user-data-dir="$dir/profile")
sed 's|</body>|<script>document.title = document.documentElement.scrollHeight</script></body>|' \
    "$dir/report.html" >"$dir/measure.html"
height=$("${chrome[@]}" --dump-dom --window-size="$width,800" "file://$dir/measure.html" \
    2>/dev/null | sed -n 's|.*<title>\([0-9][0-9]*\)</title>.*|\1|p')
if [ -z "$height" ]; then
    echo "could not measure the page's height with chromium" >&2
    exit 1
fi
"${chrome[@]}" --window-size="$width,$height" --screenshot="$out" \
    "file://$dir/report.html" 2>/dev/null
echo "$out: $width x $height px"
