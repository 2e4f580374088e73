#!/usr/bin/env bash
# The performance table of issue 13 in one command: every row measured in this run, beside its
# floor, printed as `path  value  floor  ratio  target  met|NOT MET`.
#
#   benches/grpc.sh                        # the full run (several minutes)
#   AGENTRY_BENCH_QUICK=1 benches/grpc.sh  # a smoke run: every row, small counts (noisy numbers)
#
# Environment:
#   AGENTRY_BENCH_QUICK=1      small request counts, 2,000 discovery files, 1,000 watch streams
#   AGENTRY_BENCH_ROWS=LIST    comma list of row groups to run: grpc, discovery, workers (all)
#   AGENTRY_BENCH_REQUESTS=N   h2load requests per run (60,000; quick 5,000); ListAgents runs
#                              a tenth of it (each reply is over 100× larger)
#   AGENTRY_BENCH_ROUNDS=N     alternating agentry/floor rounds per h2load row (3); medians kept
#   AGENTRY_BENCH_KEEP=1       keep the temp dir (logs, fixtures, captured frames)
#   AGENTRY_BENCH_PROFILE=debug  use the debug build (CI's smoke run: checks that the harness
#                              works; its numbers mean nothing)
#
# The gRPC rows are measured from outside: the release `agentry serve` and the floor
# (examples/floor.rs: a bare tonic server answering with the reply agentry gave to the same
# request, so the same bytes go over the wire) both pinned to CPU 0, h2load pinned to CPU 1,
# 4 connections × 16 streams. agentry runs with its contract on: bearer-token auth, the per-RPC
# span, log line and metrics (RUST_LOG=info), the file watcher. Beside req/s, each server's
# exact CPU time per request and its share of the CPU are printed, because on a shared machine
# the two servers do not get CPU 0 alike. The other rows come from `cargo bench --bench
# discovery` and `examples/workers_load.rs`, which print their own rows.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

QUICK=${AGENTRY_BENCH_QUICK:-0}
case ${1:-} in
--quick) QUICK=1 ;;
"") ;;
*) echo "usage: benches/grpc.sh [--quick]" >&2 && exit 2 ;;
esac
ROWS=${AGENTRY_BENCH_ROWS:-grpc,discovery,workers}
if [[ $QUICK == 1 ]]; then
  REQUESTS=${AGENTRY_BENCH_REQUESTS:-5000}
  DISCOVERY_ARGS=(--files 2000 --iters 3)
  WORKERS_ARGS=(--quick)
else
  REQUESTS=${AGENTRY_BENCH_REQUESTS:-60000}
  DISCOVERY_ARGS=(--files 10000 --iters 10)
  WORKERS_ARGS=()
fi
ROUNDS=${AGENTRY_BENCH_ROUNDS:-3}
CONNECTIONS=4
STREAMS=16
TARGET_DIR=${CARGO_TARGET_DIR:-target}
PROFILE=${AGENTRY_BENCH_PROFILE:-release}

wants() { [[ ,$ROWS, == *,$1,* ]]; }
say() { printf '==> %s\n' "$*" >&2; }
die() {
  printf 'grpc.sh: %s\n' "$*" >&2
  exit 1
}

case $PROFILE in
release)
  BUILD=(cargo build --release --examples --bins)
  DISCOVERY=(cargo bench --quiet --bench discovery --)
  ;;
debug)
  BUILD=(cargo build --examples --bins)
  DISCOVERY=(cargo test --quiet --bench discovery --)
  ;;
*) die "AGENTRY_BENCH_PROFILE must be release or debug, not $PROFILE" ;;
esac
BIN=$TARGET_DIR/$PROFILE

tmp=$(mktemp -d)
tmp=$(cd "$tmp" && pwd -P)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [[ ${AGENTRY_BENCH_KEEP:-0} == 1 ]]; then
    say "kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
ROWS_FILE=$tmp/rows.tsv
: >"$ROWS_FILE"

# One result row: path, value, floor, ratio, target, verdict (tab-separated).
row() {
  local IFS=$'\t'
  printf '%s\n' "$*" >>"$ROWS_FILE"
}

# Prints a tab-separated file as aligned columns under the header words $2, padded by
# characters, not bytes (×, ≥ and µ are two or three bytes in UTF-8); with $3 set, the last
# column reads "(debug build)".
table() {
  LC_ALL=C awk -F'\t' -v header="$2" -v debug="${3:-}" '
    function vlen(s) { gsub(/[\200-\277]/, "", s); return length(s) }
    function out(s, width, last) { printf "%s", s; if (!last) printf "%*s", width - vlen(s) + 2, "" }
    BEGIN { m = split(header, head, "|") }
    debug { $m = "(debug build)" }
    { n = NR; for (i = 1; i <= m; i++) { cell[n, i] = $i; if (vlen($i) > w[i]) w[i] = vlen($i) } }
    END {
      for (i = 1; i <= m; i++) if (vlen(head[i]) > w[i]) w[i] = vlen(head[i])
      for (i = 1; i <= m; i++) out(head[i], w[i], i == m)
      printf "\n"
      for (r = 1; r <= n; r++) { for (i = 1; i <= m; i++) out(cell[r, i], w[i], i == m); printf "\n" }
    }' "$1"
}

# ------------------------------------------------------------------------------------------
# Tools and build
# ------------------------------------------------------------------------------------------

say "${BUILD[*]}"
"${BUILD[@]}"

if wants grpc; then
  if ! command -v h2load >/dev/null; then
    say "h2load is missing: installing Debian's nghttp2-client with apt-get"
    sudo=()
    [[ $(id -u) == 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get install -y nghttp2-client >/dev/null ||
      { "${sudo[@]}" apt-get update >/dev/null && "${sudo[@]}" apt-get install -y nghttp2-client >/dev/null; } ||
      die "could not install nghttp2-client (h2load); install it and run again"
  fi
  command -v taskset >/dev/null || die "taskset (util-linux) is needed to pin the processes"
  if (($(nproc) < 2)); then
    die "the gRPC rows pin servers to CPU 0 and h2load to CPU 1: this machine has $(nproc) CPU"
  fi
fi

# ------------------------------------------------------------------------------------------
# gRPC rows: agentry vs the floor, measured by h2load
# ------------------------------------------------------------------------------------------

# Writes 100 personas of 1-3 KiB into $1.
write_personas() {
  local dir=$1 i k lines
  mkdir -p "$dir"
  for ((i = 0; i < 100; i++)); do
    lines=$((16 + (i * 37) % 32))
    {
      printf -- '---\nname: agent-%03d\n' "$i"
      printf 'description: "Specialist number %d; returns a short report with evidence"\n' "$i"
      printf 'tools: read, grep, find, bash\nmodel: [claude-sonnet-4-5, gpt-5-mini]\n'
      printf 'thinking_level: medium\nspawns: explore\nwhen_to_use: |\n'
      printf '  Use when a change needs an independent opinion.\n'
      printf '  Prefer it over `task` when the answer must cite files and lines.\n---\n'
      printf '# agent-%03d\n\nYou are a careful specialist.\n\n' "$i"
      for ((k = 0; k < lines; k++)); do
        printf -- '- review the change before reporting findings with file and line\n'
      done
    } >"$dir/agent-$(printf %03d "$i").md"
  done
}

# Waits for a line matching $2 in file $1 written by process $3; prints the first
# 127.0.0.1:PORT on it.
wait_addr() {
  local file=$1 pattern=$2 pid=$3 i line
  for ((i = 0; i < 300; i++)); do
    line=$(grep -m1 -- "$pattern" "$file" 2>/dev/null || true)
    if [[ -n $line ]]; then
      grep -oE '127\.0\.0\.1:[0-9]+' <<<"$line" | head -n1
      return
    fi
    kill -0 "$pid" 2>/dev/null || {
      cat "$file" >&2
      die "process $pid exited before listening"
    }
    sleep 0.1
  done
  die "no '$pattern' in $file after 30 s"
}

# CPU time (ns) the live threads of process $1 have run so far (the scheduler's exact
# sum_exec_runtime, not the tick-sampled utime/stime).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }

# h2load against server $1 (agentry|floor) for case $2, $3 requests; prints its req/s, the
# share of the run's wall time the server was on a CPU (%), its CPU µs per request, and the
# share of the wall time h2load was on a CPU (%; near 100, the client is the limit). Fails
# unless every request succeeded and every response carried a full reply frame of the captured
# size.
h2run() {
  local server=$1 case=$2 n=$3 addr=${SERVER_ADDR[$1]} pid=${SERVER_PID[$1]} out rps ok data want c0 c1
  c0=$(cpu_ns "$pid")
  out=$({
    TIMEFORMAT='h2load-cpu %R %U %S'
    time taskset -c 1 h2load -n "$n" -c "$CONNECTIONS" -m "$STREAMS" -t 1 \
      -d "$tmp/cases/$case.req" \
      -H 'content-type: application/grpc' -H 'te: trailers' \
      -H "authorization: Bearer $TOKEN" \
      "http://$addr${CASE_PATH[$case]}"
  } 2>&1) || {
    printf '%s\n' "$out" >&2
    die "h2load failed against $server ($case)"
  }
  c1=$(cpu_ns "$pid")
  rps=$(sed -n 's|^finished in [^,]*, \([0-9.]*\) req/s.*|\1|p' <<<"$out")
  ok=$(sed -n 's|^requests: .* \([0-9]*\) succeeded.*|\1|p' <<<"$out")
  data=$(sed -n 's|^traffic: .*(\([0-9]*\)) data$|\1|p' <<<"$out")
  want=$((n * (CASE_REPLY[$case] + 5)))
  if [[ -z $rps || $ok != "$n" || $data -lt $want || $data -gt $((want + n * CASE_SLACK[$case])) ]]; then
    printf '%s\n' "$out" >&2
    die "$case on $server: $ok of $n succeeded, $data response bytes (want $want: $n × \
$((CASE_REPLY[$case] + 5))-byte frames); some calls did not get the captured reply"
  fi
  awk -v rps="$rps" -v n="$n" -v t=$((c1 - c0)) -v hz=1e9 \
    -v h2="$(sed -n 's/^h2load-cpu //p' <<<"$out")" \
    'BEGIN {
      cpu = t / hz; split(h2, c, " ")
      printf "%s %.0f %.1f %.0f\n", rps, 100 * cpu * rps / n, 1e6 * cpu / n, 100 * (c[2] + c[3]) / c[1]
    }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# One h2load row: case, label, target ratio; alternates which server goes first each round.
# With a fourth argument `batched`, agentry is compared with the floor whose connections batch
# their writes as agentry's do, and the result goes to the reference table, not the targets.
grpc_row() {
  local case=$1 label=$2 target=$3 floor=${4:-floor} n=$REQUESTS r server
  local -A runs=()
  [[ $case == list ]] && n=$((REQUESTS / 10))
  h2run agentry "$case" $((n / 10)) >/dev/null # warm-up, untimed
  h2run "$floor" "$case" $((n / 10)) >/dev/null
  for ((r = 0; r < ROUNDS; r++)); do
    for server in $( ((r % 2 == 0)) && echo agentry "$floor" || echo "$floor" agentry); do
      runs[$server]+="$(h2run "$server" "$case" "$n")"$'\n'
    done
  done
  # Medians of req/s, CPU share and CPU µs per request, per server.
  local am ab ac ah fm fb fc fh
  read -r am ab ac ah < <(for k in 1 2 3 4; do printf '%s' "${runs[agentry]}" | awk -v k=$k '{ print $k }' | median; done | paste -sd' ')
  read -r fm fb fc fh < <(for k in 1 2 3 4; do printf '%s' "${runs[$floor]}" | awk -v k=$k '{ print $k }' | median; done | paste -sd' ')
  if [[ $floor == batched ]]; then
    printf '%s\t%.0f req/s\t%.0f req/s\t%s×\t%s µs\t%s µs\t%s×\n' "$label" "$am" "$fm" \
      "$(awk -v a="$am" -v f="$fm" 'BEGIN { printf "%.2f", a / f }')" "$ac" "$fc" \
      "$(awk -v a="$ac" -v f="$fc" 'BEGIN { printf "%.2f", f / a }')" >>"$tmp/batched.tsv"
    return
  fi
  say "$case: agentry $(awk '{ printf "%s ", $1 }' <<<"${runs[agentry]}")req/s, on CPU ${ab}%, \
${ac} µs CPU/request; floor $(awk '{ printf "%s ", $1 }' <<<"${runs[floor]}")req/s, on CPU ${fb}%, \
${fc} µs CPU/request (CPU-time ratio $(awk -v a="$ac" -v f="$fc" 'BEGIN { printf "%.2f", f / a }')×)"
  for server in agentry floor; do
    local busy=$ab h2=$ah
    [[ $server == floor ]] && busy=$fb h2=$fh
    if ((h2 >= 90)); then
      printf '%s: h2load was on CPU 1 for %s%% of the runs against %s: the client may be the limit, not the server\n' \
        "$case" "$h2" "$server" >>"$tmp/warnings"
    elif ((busy < 90)); then
      printf '%s: %s was on CPU 0 for only %s%% of its runs (the CPU is shared with other processes), so its req/s is below its capacity; see its CPU time per request\n' \
        "$case" "$server" "$busy" >>"$tmp/warnings"
    fi
  done
  printf '%s\t%s µs\t%s µs\t%s×\t%s%% / %s%%\t%s%% / %s%%\n' "$label" "$ac" "$fc" \
    "$(awk -v a="$ac" -v f="$fc" 'BEGIN { printf "%.2f", f / a }')" "$ab" "$fb" "$ah" "$fh" >>"$tmp/cpu.tsv"
  row "$(printf '%s (%s B reply)' "$label" "${CASE_REPLY[$case]}")" \
    "$(printf '%.0f req/s' "$am")" "$(printf '%.0f req/s' "$fm")" \
    "$(awk -v a="$am" -v f="$fm" 'BEGIN { printf "%.2f×", a / f }')" "≥ ${target}×" \
    "$(awk -v a="$am" -v f="$fm" -v t="$target" 'BEGIN { print (a / f >= t) ? "met" : "NOT MET" }')"
}

if wants grpc; then
  say "fixtures in $tmp"
  mkdir -p "$tmp/home" "$tmp/state" "$tmp/ws/repo"
  write_personas "$tmp/ws/repo/.claude/agents"
  TOKEN=bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  printf '%s: bench\n' "$TOKEN" >"$tmp/tokens.yaml"
  cat >"$tmp/agentry.yaml" <<EOF
listen: 127.0.0.1:0
home: $tmp/home
workspace_roots: [$tmp/ws]
store:
  path: $tmp/state/agentry.db
executor:
  command: [/bin/true]
# Longer than the run, so every repeated SpawnWorker stays a dedupe hit.
dedupe:
  ttl: 1h
auth:
  tokens_file: $tmp/tokens.yaml
EOF

  say "agentry serve (CPU 0)"
  RUST_LOG=info taskset -c 0 "$BIN/agentry" serve --config "$tmp/agentry.yaml" \
    >"$tmp/agentry.log" 2>&1 &
  pids+=($!)
  agentry_pid=$!
  AGENTRY_ADDR=$(wait_addr "$tmp/agentry.log" 'agentry listening' "$agentry_pid")
  declare -A SERVER_ADDR=([agentry]=$AGENTRY_ADDR) SERVER_PID=([agentry]=$agentry_pid)

  say "capturing agentry's replies from $AGENTRY_ADDR"
  "$BIN/examples/floor" capture --addr "$AGENTRY_ADDR" --token "$TOKEN" \
    --workspace "$tmp/ws/repo" --out "$tmp/cases" >/dev/null
  declare -A CASE_PATH CASE_REPLY CASE_SLACK
  while IFS=$'\t' read -r name path _ reply; do
    CASE_PATH[$name]=$path
    CASE_REPLY[$name]=$reply
    CASE_SLACK[$name]=0
  done <"$tmp/cases/cases.tsv"
  # A dedupe hit's hint says how many seconds ago the dispatch was made: up to 3 more digits.
  CASE_SLACK[dedupe]=3

  say "floor serve (CPU 0)"
  taskset -c 0 "$BIN/examples/floor" serve --replies "$tmp/cases" >"$tmp/floor.log" 2>&1 &
  pids+=($!)
  floor_pid=$!
  FLOOR_ADDR=$(wait_addr "$tmp/floor.log" 'listening on' "$floor_pid")
  SERVER_ADDR[floor]=$FLOOR_ADDR
  SERVER_PID[floor]=$floor_pid

  say "floor serve --writes batched (CPU 0), for the reference rows"
  taskset -c 0 "$BIN/examples/floor" serve --replies "$tmp/cases" --writes batched \
    >"$tmp/floor-batched.log" 2>&1 &
  pids+=($!)
  SERVER_PID[batched]=$!
  SERVER_ADDR[batched]=$(wait_addr "$tmp/floor-batched.log" 'listening on' "${SERVER_PID[batched]}")

  say "checking one call of each case on the servers (grpc-status 0, captured size)"
  for addr in "$AGENTRY_ADDR" "$FLOOR_ADDR" "${SERVER_ADDR[batched]}"; do
    "$BIN/examples/floor" verify --addr "$addr" --token "$TOKEN" --replies "$tmp/cases" >&2
  done
  workers_before=$("$BIN/examples/floor" workers --addr "$AGENTRY_ADDR" --token "$TOKEN")

  say "h2load (CPU 1): $REQUESTS requests per run, $CONNECTIONS connections × $STREAMS streams, \
$ROUNDS alternating rounds"
  grpc_row resolve 'ResolveAgent task, no workspace' 0.8
  grpc_row resolve_ws 'ResolveAgent task, workspace of 100 agents' 0.8
  grpc_row list 'ListAgents page of 100' 0.7
  grpc_row get_worker 'GetWorker of a finished worker' 0.7
  grpc_row dedupe 'SpawnWorker dedupe hit' 0.7
  # Reference only: how much of the ratio is agentry's batched writes, which the bare floor lacks.
  grpc_row resolve 'ResolveAgent task, no workspace' - batched
  grpc_row get_worker 'GetWorker of a finished worker' - batched

  workers_after=$("$BIN/examples/floor" workers --addr "$AGENTRY_ADDR" --token "$TOKEN")
  [[ $workers_after == "$workers_before" ]] ||
    die "the dedupe runs started workers ($workers_before → $workers_after): not every call was a hit"
  for p in "$agentry_pid" "$floor_pid" "${SERVER_PID[batched]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  pids=()
fi

# ------------------------------------------------------------------------------------------
# Rows measured in process by the existing benches (they print `ROW<TAB>...` lines)
# ------------------------------------------------------------------------------------------

# Runs a command, shows its report on stderr, and keeps its ROW lines.
collect() {
  local out=$tmp/collect.out
  "$@" >"$out" || {
    cat "$out" >&2
    die "$* failed"
  }
  grep -v $'^ROW\t' "$out" >&2 || true
  grep $'^ROW\t' "$out" | cut -f2- >>"$ROWS_FILE" || true
}

if wants discovery; then
  say "${DISCOVERY[*]} ${DISCOVERY_ARGS[*]}"
  collect "${DISCOVERY[@]}" "${DISCOVERY_ARGS[@]}"
fi

if wants workers; then
  say "workers_load ${WORKERS_ARGS[*]} --only 1,2,4"
  collect "$BIN/examples/workers_load" "${WORKERS_ARGS[@]}" --only 1,2,4
fi

# ------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------

printf '\n'
if [[ $PROFILE != release ]]; then
  echo "$PROFILE build (AGENTRY_BENCH_PROFILE=$PROFILE): a smoke test of the harness; the numbers mean nothing"
elif [[ $QUICK == 1 ]]; then
  echo "QUICK run (AGENTRY_BENCH_QUICK=1): small counts, numbers are a smoke test only"
fi
echo "$(uname -n), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
table "$ROWS_FILE" 'path|value|floor|ratio|target|result' "$([[ $PROFILE == release ]] || echo 1)"
if [[ -s $tmp/cpu.tsv ]]; then
  echo
  echo "CPU time per request of each server (medians; with CPU 0 to itself a CPU-bound server"
  echo "serves 1/that per second, so the ratio is what the req/s ratio would be on a quiet machine;"
  echo "on a CPU shared with other processes the two servers can get very different shares of it):"
  table "$tmp/cpu.tsv" 'path|agentry CPU/req|floor CPU/req|ratio|server on CPU 0 (agentry / floor)|h2load on CPU 1'
fi
if [[ -s $tmp/batched.tsv ]]; then
  echo
  echo "For reference, not a target: agentry against the same floor with its connections wrapped in"
  echo "agentry's BatchedWrites (floor serve --writes batched), i.e. agentry's own per-call work"
  echo "without the transport change the bare floor lacks:"
  table "$tmp/batched.tsv" 'path|agentry|batched floor|ratio|agentry CPU/req|floor CPU/req|CPU ratio'
fi
if [[ -s $tmp/warnings ]]; then
  echo
  sed 's/^/warning: /' "$tmp/warnings"
fi
