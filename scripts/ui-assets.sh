#!/usr/bin/env bash
# Refreshes the dashboard's front-end files (ui/static) from the npm
# registry at the versions pinned below, and records each file's SHA-256 in
# ui/static/VENDOR (ui's TestVendoredFilesMatchTheirChecksums checks them).
# Usage: scripts/ui-assets.sh   (make ui-assets). To move a library to a new
# version, change its pin here, run this, and look at the diff.
set -euo pipefail
cd "$(dirname "$0")/.."
HTMX=2.0.11   # npm htmx.org: requests and refresh from HTML attributes
UPLOT=1.6.32  # npm uplot: the charts
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "htmx.org@$HTMX" "uplot@$UPLOT" >/dev/null)
mkdir -p "$tmp/htmx" "$tmp/uplot"
tar -xzf "$tmp/htmx.org-$HTMX.tgz" -C "$tmp/htmx"
tar -xzf "$tmp/uplot-$UPLOT.tgz" -C "$tmp/uplot"
out=ui/static
cp "$tmp/htmx/package/dist/htmx.min.js" "$out/htmx.min.js"
cp "$tmp/htmx/package/LICENSE" "$out/htmx.LICENSE"
cp "$tmp/uplot/package/dist/uPlot.iife.min.js" "$out/uPlot.iife.min.js"
cp "$tmp/uplot/package/dist/uPlot.min.css" "$out/uPlot.min.css"
cp "$tmp/uplot/package/LICENSE" "$out/uPlot.LICENSE"
{
  echo "# package version file sha256 -- written by scripts/ui-assets.sh; do not edit"
  for f in htmx.min.js htmx.LICENSE; do echo "htmx.org $HTMX $f $(sha256sum "$out/$f" | cut -d' ' -f1)"; done
  for f in uPlot.iife.min.js uPlot.min.css uPlot.LICENSE; do echo "uplot $UPLOT $f $(sha256sum "$out/$f" | cut -d' ' -f1)"; done
} > "$out/VENDOR"
echo "ui-assets: htmx.org $HTMX, uplot $UPLOT -> $out (VENDOR updated)"
