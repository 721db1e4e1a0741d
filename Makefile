# clockd — build, test and run.
#
#   make test      vet + gofmt check + race tests; starts MySQL/RabbitMQ with
#                  docker compose first when they do not answer and Docker runs
#   make run       run clockd against local services (no Docker)
#   make bench     start a throw-away clockd and drive it with clockbench
#   make peers     the same scenarios on asynq (Redis) and River (PostgreSQL)
#
# Every variable below can be overridden: `make bench BENCH_ARGS='-n 100000'`.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO    ?= go
GOFMT ?= gofmt

# Services the integration tests use (see internal/testenv).
CLOCKD_TEST_MYSQL_DSN ?= root:@tcp(127.0.0.1:3306)/
CLOCKD_TEST_AMQP_URL  ?= amqp://guest:guest@127.0.0.1:5672/
export CLOCKD_TEST_MYSQL_DSN CLOCKD_TEST_AMQP_URL

TEST_FLAGS ?= -race -count=1 -timeout 30m
TEST_PKGS  ?= ./...
RUN_ARGS   ?= serve

FUZZ_TARGET ?= FuzzDecodeCreate
FUZZ_PKG    ?= ./internal/httpapi
FUZZ_TIME   ?= 30s

BENCH_ADDR      ?= 127.0.0.1:18080
# clockd's database; clockbench measures the MySQL ceilings on the same
# server, in a scratch database clockbench_ceiling_<run id> it drops.
BENCH_MYSQL_DSN ?= root:@tcp(127.0.0.1:3306)/clockbench
BENCH_AMQP_URL  ?= amqp://guest:guest@127.0.0.1:5672/
# Every scenario (ceilings first) unless BENCH_SCENARIO or a -scenario in
# BENCH_ARGS (it comes later, so it wins) says otherwise.
BENCH_SCENARIO  ?= all
BENCH_ARGS      ?=
BENCH_OUT       ?= bench-out
# BENCH_FRESH_DB=0 keeps the database (and a clockbench -backlog) of the last run.
BENCH_FRESH_DB  ?= 1
export BENCH_ADDR BENCH_MYSQL_DSN BENCH_AMQP_URL BENCH_SCENARIO BENCH_ARGS BENCH_OUT BENCH_FRESH_DB

.PHONY: build test services lint vet fmt-check run migrate bench peers fuzz clean

build:
	$(GO) build -o bin/ ./cmd/...

test: services lint
	$(GO) test $(TEST_FLAGS) $(TEST_PKGS)

lint: vet fmt-check

vet:
	$(GO) vet ./...

fmt-check:
	@files="$$($(GOFMT) -l .)"; \
	if [ -n "$$files" ]; then \
		echo "gofmt: these files are not formatted (run: gofmt -w .):"; \
		echo "$$files"; \
		exit 1; \
	fi

# Make sure MySQL and RabbitMQ answer at the test addresses; start the compose
# services for the ones that do not, when a Docker engine is reachable.
services:
	@bash -c "$$SH_LIB$$SERVICES_SH"

run:
	$(GO) run ./cmd/clockd $(RUN_ARGS)

migrate:
	$(GO) run ./cmd/clockd migrate

bench: build
	@bash -c "$$SH_LIB$$BENCH_SH"

# asynq and River on this machine's Redis and PostgreSQL, with clockbench's
# hot and ring scenarios (cmd/clockbench/peers, a module of its own).
PEERS_ARGS ?= -peer all -scenario all
peers:
	cd cmd/clockbench/peers && $(GO) build -o ../../../bin/peers .
	bin/peers $(PEERS_ARGS)

fuzz:
	$(GO) test -run '^$$' -fuzz '^$(FUZZ_TARGET)$$' -fuzztime $(FUZZ_TIME) $(FUZZ_PKG)

clean:
	rm -rf bin/ $(BENCH_OUT)/
	rm -f *.test *.prof *.pprof cpu.out mem.out coverage.out

# ---------------------------------------------------------------------------
# Shell snippets (bash). In a define, $$ is a shell dollar.

# Helpers: parse host/port out of a go-sql-driver DSN or an AMQP URL, probe a
# TCP port.
define SH_LIB
set -euo pipefail
mysql_hostport() {  # user:pass@tcp(host:port)/db -> host port
	local dsn=$$1 hp=127.0.0.1:3306
	if [[ $$dsn == *'@tcp('* || $$dsn == 'tcp('* ]]; then
		hp=$${dsn#*tcp(}; hp=$${hp%%)*}
	fi
	split_hostport "$$hp" 3306
}
amqp_hostport() {  # amqp[s]://user:pass@host:port/vhost -> host port
	local url=$$1 port=5672 hp
	[[ $$url == amqps://* ]] && port=5671
	hp=$${url#*://}; hp=$${hp%%/*}; hp=$${hp%%\?*}; hp=$${hp##*@}
	split_hostport "$${hp:-127.0.0.1}" "$$port"
}
split_hostport() {  # host:port | [v6]:port | host -> host port
	local hp=$$1 host port=$$2
	if [[ $$hp == \[*\]:* ]]; then host=$${hp%]:*}; host=$${host#[}; port=$${hp##*]:}
	elif [[ $$hp == \[*\] ]]; then host=$${hp#[}; host=$${host%]}
	elif [[ $$hp == *:* ]]; then host=$${hp%:*}; port=$${hp##*:}
	else host=$$hp
	fi
	echo "$${host:-127.0.0.1} $$port"
}
probe() {  # probe host port: does something accept TCP connections there?
	timeout 3 bash -c 'exec 3<>"/dev/tcp/$$1/$$2"' _ "$$1" "$$2" 2>/dev/null
}
http_ok() {  # http_ok URL: does it answer 2xx?
	if command -v curl >/dev/null; then curl -fsS -m 2 -o /dev/null "$$1" 2>/dev/null
	else wget -q -T 2 -O /dev/null "$$1" 2>/dev/null; fi
}

endef
export SH_LIB

define SERVICES_SH
missing=()
read -r h p < <(mysql_hostport "$$CLOCKD_TEST_MYSQL_DSN")
if probe "$$h" "$$p"; then echo "services: MySQL answers at $$h:$$p"
else echo "services: MySQL does not answer at $$h:$$p"; missing+=(mysql); fi
read -r h p < <(amqp_hostport "$$CLOCKD_TEST_AMQP_URL")
if probe "$$h" "$$p"; then echo "services: RabbitMQ answers at $$h:$$p"
else echo "services: RabbitMQ does not answer at $$h:$$p"; missing+=(rabbitmq); fi
(( $${#missing[@]} == 0 )) && exit 0
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
	echo "services: docker compose up -d --wait $${missing[*]}"
	docker compose up -d --wait "$${missing[@]}"
else
	echo "services: no Docker engine to start $${missing[*]}: the integration tests will FAIL"
	echo "services: (they never skip). Start what is missing, then run make test again:"
	for m in "$${missing[@]}"; do case $$m in
	mysql) echo "services:   MariaDB:  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd" ;;
	rabbitmq) echo "services:   RabbitMQ: rabbitmq-server -detached" ;;
	esac; done
	echo "services: or install, start and test everything with: bash .ci/run"
fi
endef
export SERVICES_SH

# Start bin/clockd on a fresh database, wait for /readyz, run clockbench
# against it (reports in $(BENCH_OUT)/), and always stop clockd afterwards.
# clockbench gets clockd's pid (-rss-pid) for its memory and CPU time.
define BENCH_SH
mkdir -p "$$BENCH_OUT"
read -r h p < <(mysql_hostport "$$BENCH_MYSQL_DSN")
db=$${BENCH_MYSQL_DSN##*/}; db=$${db%%\?*}
creds=$${BENCH_MYSQL_DSN%%@*}; user=$${creds%%:*}; pass=
[[ $$creds == *:* ]] && pass=$${creds#*:}
client=$$(command -v mariadb || command -v mysql || true)
if [[ $$BENCH_FRESH_DB != 1 ]]; then
	echo "bench: keeping database $$db (BENCH_FRESH_DB=$$BENCH_FRESH_DB)"
elif [[ -n $$client && -n $$db ]]; then
	echo "bench: dropping database $$db on $$h:$$p for a fresh start"
	MYSQL_PWD=$$pass "$$client" -h "$$h" -P "$$p" -u "$$user" --protocol=tcp \
		-e "DROP DATABASE IF EXISTS \`$$db\`"
else
	echo "bench: no mysql client to drop database $$db first; reusing it as it is"
fi
export CLOCKD_HTTP_ADDR=$$BENCH_ADDR CLOCKD_MYSQL_DSN=$$BENCH_MYSQL_DSN CLOCKD_AMQP_URL=$$BENCH_AMQP_URL
log=$$BENCH_OUT/clockd.log
echo "bench: starting bin/clockd on $$BENCH_ADDR (log: $$log)"
bin/clockd serve >"$$log" 2>&1 &
pid=$$!
stop() {
	kill -TERM "$$pid" 2>/dev/null || return 0
	for _ in $$(seq 50); do kill -0 "$$pid" 2>/dev/null || break; sleep 0.2; done
	kill -KILL "$$pid" 2>/dev/null || true
	wait "$$pid" 2>/dev/null || true
	echo "bench: clockd stopped"
}
trap stop EXIT
trap 'exit 130' INT TERM
for i in $$(seq 120); do
	if ! kill -0 "$$pid" 2>/dev/null; then
		echo "bench: clockd exited before it was ready; last lines of $$log:"; tail -n 30 "$$log"; exit 1
	fi
	http_ok "http://$$BENCH_ADDR/readyz" && break
	(( i == 120 )) && { echo "bench: clockd not ready after 60s"; tail -n 30 "$$log"; exit 1; }
	sleep 0.5
done
echo "bench: clockd ready; running bin/clockbench -scenario $$BENCH_SCENARIO $$BENCH_ARGS"
bin/clockbench -addr "http://$$BENCH_ADDR" -amqp "$$BENCH_AMQP_URL" -mysql "$$BENCH_MYSQL_DSN" -rss-pid "$$pid" \
	-out "$$BENCH_OUT" -scenario "$$BENCH_SCENARIO" $$BENCH_ARGS 2>&1 | tee "$$BENCH_OUT/report.txt"
endef
export BENCH_SH
