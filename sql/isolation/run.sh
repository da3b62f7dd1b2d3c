#!/usr/bin/env bash
# Runs the isolation specs (sql/isolation/specs/*.spec) with PostgreSQL's
# pg_isolation_regress against DATABASE_URL, where pgsweep is installed in
# schema pgsweep (pgtap/run.sh installs it). Deterministic interleavings of
# claims, fences and deletes: each permutation's output must equal
# sql/isolation/expected/<spec>.out. Needs postgresql-server-dev-15 (the
# isolationtester); a run that checks no spec fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
url=${DATABASE_URL:?set DATABASE_URL}
pgver=${PGSWEEP_PG_VERSION:-15}
regress=/usr/lib/postgresql/$pgver/lib/pgxs/src/test/isolation/pg_isolation_regress
[ -x "$regress" ] || { echo "isolation: $regress not found (Debian: apt-get install postgresql-server-dev-$pgver)" >&2; exit 1; }

re='^postgres(ql)?://([^:@/]*)(:([^@/]*))?@([^:/?]*)(:([0-9]+))?/([^?]*)(\?(.*))?$'
[[ $url =~ $re ]] || { echo "isolation: DATABASE_URL must be a postgres:// URL" >&2; exit 1; }
user=${BASH_REMATCH[2]} host=${BASH_REMATCH[5]} port=${BASH_REMATCH[7]:-5432} db=${BASH_REMATCH[8]}
[ -n "${BASH_REMATCH[4]}" ] && export PGPASSWORD=${BASH_REMATCH[4]}

specs=()
for f in "$root"/sql/isolation/specs/*.spec; do specs+=("$(basename "$f" .spec)"); done
[ ${#specs[@]} -gt 0 ] || { echo "isolation: no spec found" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
chmod 777 "$out"
if "$regress" --use-existing --host="$host" --port="$port" --user="$user" --dbname="$db" \
	--inputdir="$root/sql/isolation" --outputdir="$out" "${specs[@]}"; then
	echo "isolation: ${#specs[@]} passed, 0 failed"
else
	cat "$out"/regression.diffs 2>/dev/null || true
	echo "isolation: FAILED" >&2
	exit 1
fi
