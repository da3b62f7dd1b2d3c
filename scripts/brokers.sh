#!/usr/bin/env bash
# Starts (or stops) the brokers the relay's tests publish to, as local processes:
# NATS with JetStream and RabbitMQ, each on a free local port.
#
#   scripts/brokers.sh start [nats|rabbitmq|all]  install what is missing, start, print the URLs
#   scripts/brokers.sh stop  [nats|rabbitmq|all]  stop (by their pids)
#   scripts/brokers.sh env                        print NATS_URL=... and AMQP_URL=... of the running brokers
#   scripts/brokers.sh url nats|rabbitmq          print one URL (exit 1 when that broker is not running)
#
# Idempotent, like scripts/db.sh: a running broker is left alone and its URL
# printed. The state lives under .pgsweep/brokers/ (git-ignored; or
# PGSWEEP_BROKERS_DIR, so a test can run a private pair it stops and restarts
# at will). Ports are chosen free on the first start and kept in the state
# directory, so a restart (also of a stopped broker) comes back on the same
# port: clients reconnect to it. Data survives a stop: JetStream streams and
# RabbitMQ's durable queues are on disk there.
#
# NATS: Debian's nats-server, `-js` (JetStream, file storage in the state
# directory). RabbitMQ: Debian's rabbitmq-server, a standalone node run as the
# `rabbitmq` OS user, guest/guest (localhost only), with an epmd of its own on
# a private port (so stopping it never touches another Erlang node's epmd).
# Measured start times (shared/brokers.md): NATS well under a second,
# RabbitMQ about 8 seconds.
set -euo pipefail

cmd=${1:-start}
what=${2:-all}
root=$(cd "$(dirname "$0")/.." && pwd)
state=${PGSWEEP_BROKERS_DIR:-"$root/.pgsweep/brokers"}

log() { echo "brokers: $*" >&2; }

# in_use PORT: something listens on 127.0.0.1:PORT.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port: a port nothing listens on, and its neighbour (RabbitMQ's
# distribution port), both below the ephemeral range: a port in that range
# may be taken at any moment by an outgoing connection, which no listener
# check sees (RabbitMQ then failed with dist_port_already_used, not_erlang).
free_port() {
	local p lo
	lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	[ "$lo" -gt 12000 ] 2>/dev/null || lo=32768
	for _ in $(seq 1 200); do
		p=$((10000 + RANDOM % (lo - 10002)))
		in_use "$p" || in_use "$((p + 1))" || { echo "$p"; return 0; }
	done
	log "no free port found"
	return 1
}

# port NAME: the port kept for NAME, chosen (free) on first use.
port() {
	local f="$state/$1.port"
	if [ ! -s "$f" ]; then
		mkdir -p "$state"
		free_port >"$f"
	fi
	cat "$f"
}

install_missing() {
	local want=()
	case $1 in
	nats) command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || want+=(nats-server) ;;
	rabbitmq) [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || want+=(rabbitmq-server) ;;
	esac
	[ ${#want[@]} -eq 0 ] && return 0
	if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
		log "installing ${want[*]}"
		apt-get update -qq >/dev/null
		# installing rabbitmq-server may start the system's own node: this script never uses it
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-upgrade "${want[@]}" >/dev/null
		return 0
	fi
	log "${want[*]} is not installed (Debian/Ubuntu: apt-get install ${want[*]}; macOS: brew install nats-server rabbitmq)"
	return 1
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# ---- NATS -------------------------------------------------------------------

nats_url() { echo "nats://127.0.0.1:$(port nats)"; }

nats_running() { pid_alive "$state/nats/pid" && in_use "$(port nats)"; }

nats_start() {
	local dir="$state/nats" p bin
	if nats_running; then nats_url; return 0; fi
	install_missing nats
	bin=$(command -v nats-server 2>/dev/null || echo /usr/sbin/nats-server)
	p=$(port nats)
	if in_use "$p"; then log "port $p (kept in $state/nats.port) is taken by another process"; return 1; fi
	mkdir -p "$dir/js"
	log "starting NATS (JetStream) on port $p"
	# setsid: the server does not die with the shell that started it
	setsid "$bin" -js -a 127.0.0.1 -p "$p" -sd "$dir/js" -P "$dir/pid" >"$dir/out.log" 2>&1 </dev/null &
	for _ in $(seq 1 100); do
		in_use "$p" && { nats_url; return 0; }
		sleep 0.1
	done
	tail -20 "$dir/out.log" >&2
	log "NATS did not start"
	return 1
}

nats_stop() {
	local dir="$state/nats" pid
	pid_alive "$dir/pid" || { log "NATS not running"; return 0; }
	pid=$(cat "$dir/pid")
	log "stopping NATS (pid $pid)"
	kill -TERM "$pid"
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" || true
	rm -f "$dir/pid"
}

# ---- RabbitMQ -----------------------------------------------------------------

amqp_url() { echo "amqp://guest:guest@127.0.0.1:$(port rabbitmq)/"; }

# rabbit_env: the node's environment, one VAR=value per line.
rabbit_env() {
	local dir="$state/rabbitmq" p
	p=$(port rabbitmq)
	printf '%s\n' "RABBITMQ_NODENAME=pgsweep$p@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		"RABBITMQ_NODE_PORT=$p" "RABBITMQ_DIST_PORT=$((p + 1))" ERL_EPMD_ADDRESS=127.0.0.1 \
		"ERL_EPMD_PORT=$(port epmd)" \
		"RABBITMQ_MNESIA_BASE=$dir/mnesia" "RABBITMQ_LOG_BASE=$dir/log" "RABBITMQ_CONFIG_FILE=$dir/rabbitmq" \
		"RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins" "RABBITMQ_PID_FILE=$dir/pid" "HOME=$dir"
}

rabbit_running() { pid_alive "$state/rabbitmq/pid" && in_use "$(port rabbitmq)"; }

rabbit_start() {
	local dir="$state/rabbitmq" p
	if rabbit_running; then amqp_url; return 0; fi
	install_missing rabbitmq
	p=$(port rabbitmq)
	port epmd >/dev/null
	if in_use "$p"; then log "port $p (kept in $state/rabbitmq.port) is taken by another process"; return 1; fi
	mkdir -p "$dir"
	[ -f "$dir/enabled_plugins" ] || echo '[].' >"$dir/enabled_plugins"
	if [ "$(id -u)" = 0 ]; then
		id rabbitmq >/dev/null 2>&1 || useradd --system --home-dir "$dir" rabbitmq
		chown -R rabbitmq:rabbitmq "$dir"
		# the rabbitmq user must reach its directory through every parent
		local d="$dir"
		while [ "$d" != / ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
	fi
	log "starting RabbitMQ on port $p (about 8 seconds)"
	local run=(/usr/lib/rabbitmq/bin/rabbitmq-server)
	[ "$(id -u)" = 0 ] && run=(runuser -u rabbitmq -- "${run[@]}")
	local envs
	mapfile -t envs < <(rabbit_env)
	setsid env "${envs[@]}" "${run[@]}" >"$dir/out.log" 2>&1 </dev/null &
	for _ in $(seq 1 600); do
		if in_use "$p" && pid_alive "$dir/pid"; then amqp_url; return 0; fi
		sleep 0.1
	done
	tail -30 "$dir/out.log" >&2
	log "RabbitMQ did not start within 60 s"
	return 1
}

rabbit_stop() {
	local dir="$state/rabbitmq" pid
	if pid_alive "$dir/pid"; then
		pid=$(cat "$dir/pid")
		log "stopping RabbitMQ (pid $pid)"
		kill -TERM "$pid"
		for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" || true
		rm -f "$dir/pid"
	else
		log "RabbitMQ not running"
	fi
	# its private epmd (never another node's: the port is ours)
	if [ -s "$state/epmd.port" ] && in_use "$(cat "$state/epmd.port")"; then
		ERL_EPMD_PORT=$(cat "$state/epmd.port") epmd -kill >/dev/null 2>&1 || true
	fi
}

# ---- commands -------------------------------------------------------------------

case $what in
nats | rabbitmq | all) ;;
*) echo "usage: $0 start|stop [nats|rabbitmq|all] | env | url nats|rabbitmq" >&2; exit 2 ;;
esac

case $cmd in
start)
	case $what in
	nats) nats_start ;;
	rabbitmq) rabbit_start ;;
	all) nats_start; rabbit_start ;;
	esac ;;
stop)
	case $what in
	nats) nats_stop ;;
	rabbitmq) rabbit_stop ;;
	all) nats_stop; rabbit_stop ;;
	esac ;;
env)
	nats_running && echo "NATS_URL=$(nats_url)"
	rabbit_running && echo "AMQP_URL=$(amqp_url)"
	true ;;
url)
	case $what in
	nats) nats_running && nats_url ;;
	rabbitmq) rabbit_running && amqp_url ;;
	*) echo "usage: $0 url nats|rabbitmq" >&2; exit 2 ;;
	esac || { log "$what is not running; run '$0 start $what'"; exit 1; } ;;
*) echo "usage: $0 start|stop [nats|rabbitmq|all] | env | url nats|rabbitmq" >&2; exit 2 ;;
esac
