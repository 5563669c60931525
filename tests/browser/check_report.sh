#!/usr/bin/env bash
# Browser test of `gpumem report`: renders the page in headless Chromium and checks the drawn DOM.
#   check_report.sh GPUMEM_CLI TRACE OUT_DIR [NAME]
# Writes OUT_DIR/NAME.html, OUT_DIR/NAME_screenshot.png (1280x800; kept as a CI artifact) and
# OUT_DIR/NAME.dom.html. Exits 77 (CTest: skipped) when Chromium is not installed.
set -euo pipefail
cli=$1 trace=$2 out=$3 name=${4:-report}

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser=$(command -v "$b"); break; fi
done
if [ -z "$browser" ]; then
  echo "SKIPPED: no Chromium on PATH (install Debian's 'chromium', e.g. via scripts/dev)"
  exit 77
fi

mkdir -p "$out"
html=$(cd "$out" && pwd)/$name.html
shot=$(cd "$out" && pwd)/${name}_screenshot.png
dom=$(cd "$out" && pwd)/$name.dom.html
"$cli" report "$trace" -o "$html"

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --user-data-dir="$profile" --window-size=1280,800)
rm -f "$shot"
timeout 120 "$browser" "${flags[@]}" --screenshot="$shot" "file://$html" >/dev/null 2>&1 || true
timeout 120 "$browser" "${flags[@]}" --virtual-time-budget=2000 --dump-dom "file://$html" 2>/dev/null >"$dom" || true

fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok:   $1"; else echo "FAIL: $1"; fail=1; fi
}
check "the DOM was dumped" test -s "$dom"
check "the screenshot was written ($shot)" test -s "$shot"
check "the page drew without errors (body data-render=\"ok\")" grep -q '<body[^>]*data-render="ok"' "$dom"
check "no errors recorded (data-errors empty)" grep -q 'data-errors=""' "$dom"
check "the timeline's live polyline has points" grep -qE '<polyline points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+[^"]*"[^>]*class="series-live"' "$dom"
check "the timeline's reserved polyline has points" grep -qE '<polyline points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+[^"]*"[^>]*class="series-reserved"' "$dom"
check "the segment map has block rects" grep -qE '<rect [^>]*class="blk"' "$dom"
check "the histogram has bars" grep -qE '<rect [^>]*class="bar"' "$dom"
check "the top-blocks table has rows" grep -qE '<tbody><tr>' "$dom"
check "nothing is fetched (no src= or href= to http)" bash -c "! grep -qiE '(src|href)=\"?https?:' '$html'"
if [ "$fail" = 1 ]; then
  grep -o '<body[^>]*>' "$dom" || true
  exit 1
fi
echo "report: $html"
echo "screenshot: $shot"
