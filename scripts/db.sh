#!/usr/bin/env bash
# Starts (or stops) the project's throwaway PostgreSQL cluster.
#
#   scripts/db.sh start   install what is missing, start the cluster, print its DSN
#   scripts/db.sh stop    stop it (by its pid)
#   scripts/db.sh dsn     print the DSN of a running cluster
#   scripts/db.sh ctl ARGS...   pg_ctl ARGS on the cluster, as its OS user (e.g. `ctl restart -m immediate`)
#
# The cluster lives under .pgsweep/ in the repository (git-ignored), runs as the
# `postgres` OS user because PostgreSQL refuses to run as root, listens on a
# private port (PGSWEEP_DB_PORT, default 54329) and preloads pg_cron when it is
# installed. Its settings trade durability for speed: it is for tests and demos.
#
# A second cluster (the fault-injection suite's, which it restarts and stops
# at will) runs beside it with its own directory and port:
#   PGSWEEP_DB_DIR=/tmp/x PGSWEEP_DB_PORT=54339 scripts/db.sh start|stop|dsn|ctl
set -euo pipefail

cmd=${1:-start}
root=$(cd "$(dirname "$0")/.." && pwd)
state=${PGSWEEP_DB_DIR:-"$root/.pgsweep"}
data="$state/data"
port=${PGSWEEP_DB_PORT:-54329}
dbname=${PGSWEEP_DB_NAME:-pgsweep}
pgver=${PGSWEEP_PG_VERSION:-15}
dsn="postgres://postgres@127.0.0.1:$port/$dbname?sslmode=disable"

log() { echo "db: $*" >&2; }

find_bindir() {
	local d
	for d in "/usr/lib/postgresql/$pgver/bin" $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
		[ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
	done
	command -v pg_ctl >/dev/null 2>&1 && { dirname "$(command -v pg_ctl)"; return 0; }
	return 1
}

# as_pg runs a command as the postgres OS user when we are root, as ourselves otherwise.
as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install_missing() {
	local want=() pkg
	[ -x "/usr/lib/postgresql/$pgver/bin/pg_ctl" ] || want+=("postgresql-$pgver")
	[ -f "/usr/share/postgresql/$pgver/extension/pg_cron.control" ] || want+=("postgresql-$pgver-cron")
	[ -f "/usr/share/postgresql/$pgver/extension/pgtap.control" ] || want+=("postgresql-$pgver-pgtap")
	[ -f "/usr/share/postgresql/$pgver/extension/pg_partman.control" ] || want+=("postgresql-$pgver-partman")
	command -v pg_prove >/dev/null 2>&1 || want+=("libtap-parser-sourcehandler-pgtap-perl")
	# the isolationtester (make isolation); pinned to the server's version below
	[ -x "/usr/lib/postgresql/$pgver/lib/pgxs/src/test/isolation/pg_isolation_regress" ] || want+=("postgresql-server-dev-$pgver")
	[ ${#want[@]} -eq 0 ] && return 0
	if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
		log "installing ${want[*]}"
		apt-get update -qq >/dev/null
		local plain=() dev=0
		for pkg in "${want[@]}"; do
			if [ "$pkg" = "postgresql-server-dev-$pgver" ]; then dev=1; else plain+=("$pkg"); fi
		done
		[ ${#plain[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-upgrade "${plain[@]}" >/dev/null
		# unpinned, apt would upgrade the server under a running cluster
		[ $dev = 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-upgrade \
			"postgresql-server-dev-$pgver=$(dpkg-query -W -f='${Version}' "postgresql-$pgver")" >/dev/null
		return 0
	fi
	for pkg in "${want[@]}"; do
		case $pkg in
		postgresql-$pgver)
			log "PostgreSQL $pgver is not installed. Install it (Debian/Ubuntu: apt-get install postgresql-$pgver;"
			log "macOS: brew install postgresql@$pgver), or set TEST_DATABASE_URL to an existing database."
			exit 1 ;;
		*) log "optional package missing: $pkg (Debian: apt-get install $pkg)" ;;
		esac
	done
}

running() {
	[ -f "$data/postmaster.pid" ] || return 1
	local pid
	pid=$(head -1 "$data/postmaster.pid")
	kill -0 "$pid" 2>/dev/null
}

# The socket path must fit in sun_path (107 bytes); a deep checkout falls back to /tmp.
socket_dir() {
	local d="$state/run"
	if [ ${#d} -gt 80 ]; then d="/tmp/pgsweep-$port"; fi
	echo "$d"
}

start() {
	install_missing
	local bindir sock
	bindir=$(find_bindir) || { log "pg_ctl not found; install PostgreSQL $pgver"; exit 1; }
	sock=$(socket_dir)
	if running; then
		log "already running (pid $(head -1 "$data/postmaster.pid"))"
		echo "$dsn"
		return 0
	fi
	mkdir -p "$state" "$sock"
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || useradd --system --home-dir "$state" postgres
		chown postgres "$state" "$sock"
		# postgres must be able to reach the data directory through every parent.
		local p="$state"
		while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
	fi
	if [ ! -f "$data/PG_VERSION" ]; then
		log "initdb $data"
		as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$state/initdb.log" 2>&1 ||
			as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C >"$state/initdb.log" 2>&1
		local preload="" cron=""
		if [ -f "$("$bindir/pg_config" --sharedir 2>/dev/null || echo /usr/share/postgresql/$pgver)/extension/pg_cron.control" ]; then
			preload="shared_preload_libraries = 'pg_cron'"
			cron="cron.database_name = '$dbname'
cron.use_background_workers = on"
		else
			log "pg_cron is not installed: the cluster starts without it (cron features will be unavailable)"
		fi
		cat >>"$data/postgresql.conf" <<EOF

# --- pgsweep throwaway cluster: fast, not durable ---
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sock'
max_connections = 400
shared_buffers = 512MB
work_mem = 16MB
maintenance_work_mem = 256MB
max_wal_size = 8GB
checkpoint_timeout = 30min
fsync = off
synchronous_commit = off
full_page_writes = off
max_locks_per_transaction = 256
max_worker_processes = 32
# health()'s tests make a prepared transaction and a logical replication slot
max_prepared_transactions = 10
wal_level = logical
max_replication_slots = 10
log_min_messages = warning
log_lock_waits = on
deadlock_timeout = 100ms
$preload
$cron
EOF
	fi
	log "starting on port $port"
	as_pg "$bindir/pg_ctl" -D "$data" -l "$state/postgres.log" -w -t 60 start >/dev/null ||
		{ tail -20 "$state/postgres.log" >&2; exit 1; }
	if ! as_pg "$bindir/psql" -h "$sock" -p "$port" -U postgres -d postgres -Atqc \
		"SELECT 1 FROM pg_database WHERE datname = '$dbname'" | grep -q 1; then
		as_pg "$bindir/createdb" -h "$sock" -p "$port" -U postgres "$dbname"
	fi
	echo "$dsn" >"$state/dsn"
	echo "$dsn"
}

stop() {
	if ! running; then
		log "not running"
		return 0
	fi
	local pid
	pid=$(head -1 "$data/postmaster.pid")
	log "stopping pid $pid"
	kill -INT "$pid"
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	rm -f "$state/dsn"
}

# ctl runs pg_ctl on this cluster as its OS user. The server's output goes to
# the cluster's log, never to the caller's stdout (a restarted postmaster would
# hold the caller's pipe open).
ctl() {
	local bindir
	bindir=$(find_bindir) || { log "pg_ctl not found; install PostgreSQL $pgver"; exit 1; }
	[ -f "$data/PG_VERSION" ] || { log "no cluster in $data; run '$0 start'"; exit 1; }
	as_pg "$bindir/pg_ctl" -D "$data" -l "$state/postgres.log" "$@" </dev/null >/dev/null
}

case $cmd in
start) start ;;
stop) stop ;;
dsn) running && echo "$dsn" || { log "not running; run 'make db'"; exit 1; } ;;
ctl) shift; ctl "$@" ;;
*) echo "usage: $0 start|stop|dsn|ctl ARGS..." >&2; exit 2 ;;
esac
