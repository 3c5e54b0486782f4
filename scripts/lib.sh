# Shell functions the bench scripts share: a free loopback port, a server started in the
# background and waited for until it answers, and its stop. Source it (`. scripts/lib.sh`); it
# defines functions and `server_pid` and runs nothing.
#
# `server_pid` is the pid of the server `start_server` started, "" when none runs, so that a
# script's EXIT trap can kill what is left of a run that failed half-way.
server_pid=""

# The leaseq binary to measure: $LEASEQ_BIN, else target/release/leaseq of the repository (the
# working directory), built first.
leaseq_binary() {
    if [[ -z "${LEASEQ_BIN:-}" ]]; then
        cargo build -q --release -p leaseq
    fi
    echo "${LEASEQ_BIN:-$PWD/target/release/leaseq}"
}

# A TCP port on 127.0.0.1 that nothing listens on right now. Another process may take it before
# the server binds it; on a shared machine that is rare enough for a benchmark.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ready [--tcp] PORT: waits, READY_TIMEOUT_S seconds at the most (default 10), until 127.0.0.1:PORT answers GET /health with
# a 200 (with --tcp: until it accepts a connection, for a TLS listener, whose /health is not
# plain HTTP). Gives up early if the server `server_pid` names has exited. Returns 1, with a
# line on stderr, if it never answered.
wait_ready() {
    local tcp=""
    if [[ "$1" == --tcp ]]; then
        tcp=1
        shift
    fi
    local port="$1"
    for _ in $(seq 1 $((${READY_TIMEOUT_S:-10} * 10))); do
        if [[ -n "$tcp" ]]; then
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        else
            curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
        fi
        if [[ -n "$server_pid" ]] && ! kill -0 "$server_pid" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    echo "$(basename "$0"): the server did not answer on port $port" >&2
    return 1
}

# start_server [--tcp] PORT LOG COMMAND...: runs COMMAND in the background with its output in
# LOG (a file, or /dev/null), sets `server_pid`, and waits for it as `wait_ready` does.
start_server() {
    local ready=()
    if [[ "$1" == --tcp ]]; then
        ready=(--tcp)
        shift
    fi
    local port="$1" log="$2"
    shift 2
    "$@" >"$log" 2>&1 &
    server_pid=$!
    wait_ready "${ready[@]}" "$port"
}

# stop_server [SIGNAL]: sends the server SIGNAL (default TERM, a graceful stop; valgrind wants
# INT to write its profile), waits for it to exit and clears `server_pid`.
stop_server() {
    [[ -n "$server_pid" ]] || return 0
    kill "-${1:-TERM}" "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}
