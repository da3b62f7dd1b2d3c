// Package uitest drives pgsweep's dashboard (package ui) in headless
// Chromium with chromedp, against a real PostgreSQL: every page loads
// without a console error or a failed request, attacker-controlled text
// never runs, the refresh shows what changed, and the actions work or are
// refused. It is a module of its own so that chromedp stays out of the
// client's module graph. Tests only; `make test` runs it and fails when no
// browser is found (set PGSWEEP_CHROMIUM to its path; default: chromium on
// PATH).
package uitest
