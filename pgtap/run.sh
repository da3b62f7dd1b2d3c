#!/usr/bin/env bash
# Runs the pgTAP suite (sql/tests/*.sql) with pg_prove against DATABASE_URL.
#
# It installs pgTAP and migrates pgsweep into the default schema first, then
# fails unless pg_prove ran at least one test and every test passed: a run
# that executes nothing is a failure, not a success.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
url=${DATABASE_URL:?set DATABASE_URL (make test sets it from make db)}

command -v pg_prove >/dev/null || { echo "pgtap: pg_prove not found (Debian: apt-get install libtap-parser-sourcehandler-pgtap-perl)" >&2; exit 1; }
psql "$url" -qAtX -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null ||
	{ echo "pgtap: CREATE EXTENSION pgtap failed (Debian: apt-get install postgresql-15-pgtap)" >&2; exit 1; }
(cd "$root" && go run ./cmd/pgsweep migrate --database-url "$url")

# pg_prove hands its --dbname to psql in a way that loses URLs, so split the
# URL into the standard PG* variables that psql reads.
re='^postgres(ql)?://([^:@/]*)(:([^@/]*))?@([^:/?]*)(:([0-9]+))?/([^?]*)(\?(.*))?$'
if [[ $url =~ $re ]]; then
	export PGUSER=${BASH_REMATCH[2]} PGHOST=${BASH_REMATCH[5]} PGPORT=${BASH_REMATCH[7]:-5432} PGDATABASE=${BASH_REMATCH[8]}
	[ -n "${BASH_REMATCH[4]}" ] && export PGPASSWORD=${BASH_REMATCH[4]}
	[[ ${BASH_REMATCH[10]} == *sslmode=disable* ]] && export PGSSLMODE=disable
else
	echo "pgtap: DATABASE_URL must be a postgres:// URL, got something else" >&2
	exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
pg_prove --ext .sql --failures "$@" "$root"/sql/tests/ 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
tests=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$log" | tail -1)
if [ "$status" -ne 0 ] || ! grep -q '^Result: PASS' "$log"; then
	echo "pgtap: FAILED" >&2
	exit 1
fi
if [ -z "$tests" ] || [ "$tests" -eq 0 ]; then
	echo "pgtap: no test ran — treating as failure" >&2
	exit 1
fi
echo "pgtap: $tests tests passed"
