#!/usr/bin/env bash
# Starts (or stops) a throwaway Citus cluster: a coordinator and two workers.
#
#   scripts/citus.sh start    start the three nodes (creating them the first time), print the coordinator's DSN
#   scripts/citus.sh stop     stop them (by their pids)
#   scripts/citus.sh dsn      print the coordinator's DSN of a running cluster
#   scripts/citus.sh nodes    print "name DSN" of every node (coordinator, worker1, worker2)
#   scripts/citus.sh status   say whether each node runs
#
# Like scripts/db.sh: the nodes live under .pgsweep/citus/ (git-ignored;
# PGSWEEP_CITUS_DIR moves them), run as the `postgres` OS user because
# PostgreSQL refuses to run as root, from the installed PostgreSQL 15 binaries,
# on free local ports (from PGSWEEP_CITUS_PORT, default 54350, upwards; the
# ports chosen the first time are kept in .pgsweep/citus/ports). Every node
# preloads citus (first) and pg_stat_statements (the Citus tier counts the
# calls each worker ran) and has both extensions in database pgsweep; the
# coordinator also preloads pg_cron when it is installed, and creates it with
# Citus's DDL propagation off (the workers do not preload it). Distributed
# tables get 8 shards (citus.shard_count; Citus's default is 32): quicker to
# create, per test. Settings trade durability for speed: for tests.
#
# Citus is not in Debian: install it with ../shared/citus/install.sh (the
# project's tests) or from Citus's own packages (users). Without it this script
# says so and exits 1.
#
# Idempotent: a running node is left alone, a stopped one is started, and the
# nodes are (re)registered with the coordinator only when missing.
set -euo pipefail

cmd=${1:-start}
root=$(cd "$(dirname "$0")/.." && pwd)
state=${PGSWEEP_CITUS_DIR:-"$root/.pgsweep/citus"}
base=${PGSWEEP_CITUS_PORT:-54350}
dbname=${PGSWEEP_DB_NAME:-pgsweep}
pgver=15
bindir=/usr/lib/postgresql/$pgver/bin
nodes=(coordinator worker1 worker2)

log() { echo "citus: $*" >&2; }

as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

citus_installed() {
	[ -f "/usr/lib/postgresql/$pgver/lib/citus.so" ] && [ -f "/usr/share/postgresql/$pgver/extension/citus.control" ]
}

port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ports prints the three ports, choosing free ones the first time.
ports() {
	if [ -f "$state/ports" ]; then cat "$state/ports"; return 0; fi
	local chosen=() p=$base
	while [ ${#chosen[@]} -lt 3 ]; do
		[ $p -lt $((base + 200)) ] || { log "no free port in $base..$((base + 200))"; exit 1; }
		port_free $p && chosen+=($p)
		p=$((p + 1))
	done
	mkdir -p "$state"
	echo "${chosen[*]}" >"$state/ports"
	echo "${chosen[*]}"
}

port_of() {
	local i=0 n p
	read -r -a p <<<"$(ports)"
	for n in "${nodes[@]}"; do
		[ "$n" = "$1" ] && { echo "${p[$i]}"; return 0; }
		i=$((i + 1))
	done
	return 1
}

dsn_of() { echo "postgres://postgres@127.0.0.1:$(port_of "$1")/$dbname?sslmode=disable"; }

data_of() { echo "$state/$1"; }

running() {
	local data pid
	data=$(data_of "$1")
	[ -f "$data/postmaster.pid" ] || return 1
	pid=$(head -1 "$data/postmaster.pid")
	kill -0 "$pid" 2>/dev/null
}

socket_dir() {
	local d="$state/run"
	if [ ${#d} -gt 80 ]; then d="/tmp/pgsweep-citus-$base"; fi
	echo "$d"
}

psql_on() { # node, sql...
	local node=$1; shift
	as_pg "$bindir/psql" -h "$(socket_dir)" -p "$(port_of "$node")" -U postgres -d "$dbname" -v ON_ERROR_STOP=1 -qAtX "$@"
}

init_node() {
	local node=$1 data port sock preload extra=""
	data=$(data_of "$node")
	port=$(port_of "$node")
	sock=$(socket_dir)
	[ -f "$data/PG_VERSION" ] && return 0
	log "initdb $node ($data)"
	as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$state/initdb-$node.log" 2>&1 ||
		as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C >"$state/initdb-$node.log" 2>&1
	preload="citus,pg_stat_statements"
	if [ "$node" = coordinator ] && [ -f "/usr/share/postgresql/$pgver/extension/pg_cron.control" ]; then
		preload="$preload,pg_cron"
		extra="cron.database_name = '$dbname'
cron.use_background_workers = on"
	fi
	cat >>"$data/postgresql.conf" <<EOF

# --- pgsweep throwaway Citus node ($node): fast, not durable ---
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sock'
shared_preload_libraries = '$preload'
max_connections = 300
shared_buffers = 128MB
work_mem = 8MB
max_wal_size = 2GB
checkpoint_timeout = 30min
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
max_locks_per_transaction = 256
max_worker_processes = 32
max_prepared_transactions = 200
log_min_messages = warning
log_lock_waits = on
deadlock_timeout = 100ms
pg_stat_statements.track = all
citus.max_client_connections = 250
citus.shard_count = 8
$extra
EOF
}

start_node() {
	local node=$1 data
	data=$(data_of "$node")
	if running "$node"; then return 0; fi
	log "starting $node on port $(port_of "$node")"
	as_pg "$bindir/pg_ctl" -D "$data" -l "$state/$node.log" -w -t 60 start >/dev/null </dev/null ||
		{ tail -20 "$state/$node.log" >&2; exit 1; }
	if ! as_pg "$bindir/psql" -h "$(socket_dir)" -p "$(port_of "$node")" -U postgres -d postgres -qAtX -c \
		"SELECT 1 FROM pg_database WHERE datname = '$dbname'" | grep -q 1; then
		as_pg "$bindir/createdb" -h "$(socket_dir)" -p "$(port_of "$node")" -U postgres "$dbname"
	fi
	# Only when missing: on a cluster that was stopped, Citus refuses even an
	# IF NOT EXISTS on a worker that holds metadata, and the coordinator's
	# connects to the registered nodes.
	if [ "$(psql_on "$node" -qAtX -c "SELECT count(*) FROM pg_extension WHERE extname IN ('citus', 'pg_stat_statements')")" != 2 ]; then
		psql_on "$node" -c "CREATE EXTENSION IF NOT EXISTS citus; CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
	fi
	# pg_cron runs on the coordinator only: created there with Citus's DDL
	# propagation off (propagated, it would fail on the workers, which do not preload it).
	if [ "$node" = coordinator ] && [ -f "/usr/share/postgresql/$pgver/extension/pg_cron.control" ]; then
		psql_on "$node" -c "SET citus.enable_ddl_propagation TO off; CREATE EXTENSION IF NOT EXISTS pg_cron" >/dev/null
	fi
}

start() {
	citus_installed || {
		log "Citus is not installed: run ../shared/citus/install.sh as root (tests), or install Citus's own packages (https://docs.citusdata.com)"
		exit 1
	}
	[ -x "$bindir/pg_ctl" ] || { log "PostgreSQL $pgver is not installed ($bindir)"; exit 1; }
	mkdir -p "$state"
	ports >/dev/null
	local sock n
	sock=$(socket_dir)
	mkdir -p "$sock"
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || useradd --system --home-dir "$state" postgres
		chown postgres "$state" "$sock"
		local p="$state"
		while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
	fi
	for n in "${nodes[@]}"; do init_node "$n"; done
	for n in "${nodes[@]}"; do start_node "$n"; done
	# Register the nodes once (citus_add_node is not idempotent on every version).
	psql_on coordinator -c "SELECT citus_set_coordinator_host('127.0.0.1', $(port_of coordinator))
	                         WHERE NOT EXISTS (SELECT 1 FROM pg_dist_node WHERE groupid = 0)" >/dev/null
	for n in worker1 worker2; do
		psql_on coordinator -c "SELECT citus_add_node('127.0.0.1', $(port_of "$n"))
		                         WHERE NOT EXISTS (SELECT 1 FROM pg_dist_node WHERE nodeport = $(port_of "$n"))" >/dev/null
	done
	dsn_of coordinator >"$state/dsn"
	dsn_of coordinator
}

stop() {
	local n data pid
	for n in worker2 worker1 coordinator; do
		running "$n" || continue
		data=$(data_of "$n")
		pid=$(head -1 "$data/postmaster.pid")
		log "stopping $n (pid $pid)"
		kill -INT "$pid"
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	done
	rm -f "$state/dsn"
}

all_running() {
	local n
	for n in "${nodes[@]}"; do running "$n" || return 1; done
}

case $cmd in
start) start ;;
stop) stop ;;
dsn)
	all_running && dsn_of coordinator || { log "not running; run 'make citus'"; exit 1; } ;;
nodes)
	all_running || { log "not running; run 'make citus'"; exit 1; }
	for n in "${nodes[@]}"; do echo "$n $(dsn_of "$n")"; done ;;
status)
	for n in "${nodes[@]}"; do
		if [ -f "$state/ports" ] && running "$n"; then echo "$n running $(dsn_of "$n")"; else echo "$n stopped"; fi
	done ;;
*) echo "usage: $0 start|stop|dsn|nodes|status" >&2; exit 2 ;;
esac
