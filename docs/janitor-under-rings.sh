#!/usr/bin/env bash
# The janitor's drain of a large backlog, and what it does to ringing
# (issue 9's "10 M finished clocks past retention and 1 M pending: the
# janitor empties it at >= 50,000 rows/s while a 5,000 rings/s scenario
# keeps p99 within 1.5x of its figure without the janitor").
#
#   make build && bash docs/janitor-under-rings.sh [FINISHED] [RING_RUNS]
#
# It starts a private MariaDB (port $PORT, buffer pool $POOL, slow log at
# 0.1 s) in a temporary directory, migrates a database, fills it with
# FINISHED (default 10,000,000) finished clocks 2-5 days old and a tenth as
# many pending ones due from tomorrow on, then:
#   1. starts bin/clockd with retentions of a year (the janitor has nothing
#      to do) and runs RING_RUNS (default 3) clockbench ring scenarios
#      (50,000 clocks over 10 s: 5,000 rings/s): the figure without the janitor;
#   2. restarts bin/clockd with the default retention: the janitor drains the
#      backlog; the same ring scenarios run at once, during the drain;
#   3. waits for the drain to end and prints its rate, overall and after the
#      ring scenarios, from clockd_janitor_rows_total sampled every 2 s.
# RabbitMQ is the local one (exchange clock.ring.jb). Output: $OUT.
# MYSQLD_EXTRA adds mariadbd options (e.g. --innodb-flush-log-at-trx-commit=2).
set -u
N=${1:-10000000}
RUNS=${2:-3}
PORT=${PORT:-3400}
POOL=${POOL:-12G}
BIN=${BIN:-bin}
DIR=$(mktemp -d /tmp/clockd-janitor-bench.XXXXXX)
OUT=${OUT:-$DIR/out}
mkdir -p "$OUT"
echo "working in $DIR"

mariadb-install-db --no-defaults --datadir="$DIR/data" --auth-root-authentication-method=normal \
	--skip-test-db --skip-name-resolve --user="$(id -un)" >/dev/null || exit 1
/usr/sbin/mariadbd --no-defaults --datadir="$DIR/data" --socket="$DIR/s.sock" --pid-file="$DIR/pid" \
	--log-error="$DIR/error.log" --port="$PORT" --bind-address=127.0.0.1 --skip-name-resolve \
	--innodb-buffer-pool-size="$POOL" --innodb-log-file-size=2G --max-connections=500 \
	--character-set-server=utf8mb4 --skip-log-bin --slow-query-log=1 --long-query-time=0.1 \
	--slow-query-log-file="$OUT/slow.log" --user="$(id -un)" ${MYSQLD_EXTRA:-} &
MYPID=$!
CPID=
cleanup() {
	[[ -n $CPID ]] && kill "$CPID" 2>/dev/null && wait "$CPID" 2>/dev/null
	kill "$MYPID" 2>/dev/null && wait "$MYPID" 2>/dev/null
	rm -rf "$DIR/data"
}
trap cleanup EXIT
M="mariadb -h127.0.0.1 -P$PORT -uroot"
for _ in $(seq 60); do $M -e "SELECT 1" >/dev/null 2>&1 && break; sleep 0.5; done
DSN="root:@tcp(127.0.0.1:$PORT)/jb"
CLOCKD_MYSQL_DSN=$DSN "$BIN/clockd" migrate >/dev/null 2>&1 || { echo "migrate failed"; exit 1; }

NOW=$(date +%s%3N)
P=$((N / 10))
t0=$(date +%s)
for ((done = 0; done < N; done += 1000000)); do
	c=$((N - done < 1000000 ? N - done : 1000000))
	# finished 2-5 days ago in id order, give or take an hour; 8 in 10 rung
	$M jb -e "INSERT INTO clock (application, business_id, shard, status, payload, content_type,
		target_ring_at, next_try_time, attempts, rung_at, create_time, update_time)
		SELECT CONCAT('app-', seq % 20), CONCAT('f-', $done + seq), seq % 32, IF(seq % 10 < 8, 'rung', 'cancelled'),
		REPEAT('x', 100), 'application/json',
		@t := $NOW - 5*86400000 + ($done + seq) * (3*86400000 DIV $N) + (seq * 7919) % 3600000, @t, 1, @t,
		$NOW - 10*86400000, @t FROM seq_1_to_$c" || exit 1
done
$M jb -e "INSERT INTO clock (application, business_id, shard, status, payload, content_type,
	target_ring_at, next_try_time, attempts, create_time, update_time)
	SELECT CONCAT('app-', seq % 20), CONCAT('p-', seq), seq % 32, 'pending', REPEAT('x', 100), 'application/json',
	@t := $NOW + 86400000 + seq * 1000, @t, 0, $NOW, $NOW FROM seq_1_to_$P; ANALYZE TABLE clock" >/dev/null || exit 1
echo "filled $N finished + $P pending clocks in $(($(date +%s) - t0)) s"

start() { # label, then environment
	local l=$1
	shift
	env "$@" CLOCKD_MYSQL_DSN="$DSN" CLOCKD_HTTP_ADDR=127.0.0.1:18091 CLOCKD_EXCHANGE=clock.ring.jb \
		CLOCKD_INSTANCE_ID=jb "$BIN/clockd" serve >"$OUT/clockd.$l.log" 2>&1 &
	CPID=$!
	for _ in $(seq 120); do curl -sf http://127.0.0.1:18091/readyz >/dev/null && return; sleep 0.5; done
	echo "clockd not ready"
	exit 1
}
stop() { kill "$CPID"; wait "$CPID" 2>/dev/null; CPID=; }
moved() { curl -s http://127.0.0.1:18091/metrics | awk '/^clockd_janitor_rows_total/ {s += $2} END {print s + 0}'; }
# ring NAME [CLOCKBENCH FLAGS...]
ring() {
	local name=$1
	shift
	"$BIN/clockbench" -addr http://127.0.0.1:18091 -mysql "$DSN" -exchange clock.ring.jb -scenario ring -n 50000 -span 10s \
		-out "$OUT/bench.$name" "$@" >"$OUT/ring.$name.txt" 2>&1
	echo "[$name] $(grep -o 'ring: received.*' "$OUT/ring.$name.txt")"
}

start base CLOCKD_RETENTION=8760h CLOCKD_RETENTION_FAILED=8760h
for r in $(seq "$RUNS"); do ring "without-janitor-$r"; done
stop

start drain
(while sleep 2; do
	echo "$(date +%s.%N) $(moved)"
done >"$OUT/moved.log") &
POLL=$!
T0=$(date +%s.%N)
# the drain keeps the machine busy: that is the load under test, so
# clockbench must not wait for a quiet machine first
for r in $(seq "$RUNS"); do ring "during-drain-$r" -quiet-busy 0; done
T1=$(date +%s.%N)
AT1=$(moved)
until grep -q '"janitor run"' "$OUT/clockd.drain.log"; do sleep 0.5; done
T2=$(date +%s.%N)
kill "$POLL"
stop
echo "drain: $N clocks in $(echo "$T2 - $T0" | bc) s from clockd's start: $(echo "$N / ($T2 - $T0)" | bc) rows/s;" \
	"after the ring scenarios: $(echo "($N - $AT1) / ($T2 - $T1)" | bc) rows/s"
echo "statements over 100 ms (slow log; the fill's own INSERT ... SELECT FROM seq_1_to_N among them):"
grep -A3 '^# Query_time' "$OUT/slow.log" | grep -v '^#\|^SET timestamp\|^--\|^use' | cut -c1-70 | sort | uniq -c
