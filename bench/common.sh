# Helpers shared by the benchmark scripts (sourced, not run).

# The TCP benchmarks run both engines on this host, which would otherwise
# pick the local transport (shared memory, cross-memory attach): a figure set
# beside iperf3's or sockperf's would not be TCP's. Each `ferry bench` line
# also says FERRY_TRANSPORT=tcp itself, and its table is read with
# tcp_table_value, which refuses a table of another transport.
export FERRY_TRANSPORT=tcp

# Median of the numbers given as arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# Converts "18.5 Gbits/sec" style figures to GB/s.
to_gbytes() {
  awk -v v="$1" -v u="$2" 'BEGIN {
    m = (u ~ /^G/) ? 1e9 : (u ~ /^M/) ? 1e6 : (u ~ /^K/) ? 1e3 : 1;
    if (u ~ /bits/) m /= 8;
    printf "%.3f", v * m / 1e9 }'
}

# A free TCP port on loopback.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }

# iperf3 with one stream over loopback for 5 s: the receiver's GB/s.
iperf3_gbytes() {
  local port srv line
  port=$(free_port)
  iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
  srv=$!
  sleep 0.3
  line=$(iperf3 -c 127.0.0.1 -p "$port" -P 1 -t 5 -f g | grep receiver | tail -1)
  wait "$srv" || true
  to_gbytes "$(echo "$line" | awk '{print $(NF-2)}')" "$(echo "$line" | awk '{print $(NF-1)}')"
}

# sockperf's TCP ping-pong of 16 bytes over loopback for 5 s: the median full
# round trip in us.
sockperf_p50_us() {
  local port srv
  port=$(free_port)
  sockperf server --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -m 16 -t 5 --full-rtt 2>&1 | awk '/percentile 50.000/ {print $NF}'
  kill "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null || true
}

# sockperf's TCP ping-pong of 16 bytes over loopback for 5 s, as
# "P50_US CPU_US": the median full round trip and the CPU time of client and
# server together per round trip (the server's from /proc/PID/stat, the
# client's from bash's time; round trips counted from the rate sockperf
# reports over its valid duration, times the client's whole run).
sockperf_p50_and_cpu_us() {
  local port srv out ticks0 ticks1 wall user sys
  port=$(free_port)
  sockperf server --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  out=$(mktemp)
  ticks0=$(awk '{print $14 + $15}' "/proc/$srv/stat")
  read -r wall user sys < <({ TIMEFORMAT='%3R %3U %3S'; time sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -m 16 -t 5 \
    --full-rtt >"$out" 2>&1; } 2>&1)
  ticks1=$(awk '{print $14 + $15}' "/proc/$srv/stat")
  kill "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null || true
  awk -v wall="$wall" -v cpu="$(awk -v u="$user" -v s="$sys" -v t=$((ticks1 - ticks0)) -v hz="$(getconf CLK_TCK)" \
      'BEGIN {print u + s + t / hz}')" '
    /percentile 50.000/ { p50 = $NF }
    /Valid Duration/ { match($0, /RunTime=[0-9.]+/); run = substr($0, RSTART + 8, RLENGTH - 8)
                       match($0, /SentMessages=[0-9]+/); sent = substr($0, RSTART + 13, RLENGTH - 13) }
    END { printf "%s %.1f\n", p50, cpu * 1e6 / (sent / run * wall) }' "$out"
  rm -f "$out"
}

# The value of column $2 in the row whose first field is $1, from `ferry bench` table output on stdin.
table_value() { awk -v size="$1" -v col="$2" '$1 == size { print $col }'; }

# table_value of a table that measured TCP: its first line ("# send over the
# tcp transport (...)") must name tcp; another transport is an error (exit 1,
# the transport named on stderr). A table without that line comes from a
# build older than it, trusted to FERRY_TRANSPORT=tcp on its command line.
tcp_table_value() {
  awk -v size="$1" -v col="$2" '
    /^# / && match($0, /over the [a-z]+ transport/) { transport = substr($0, RSTART + 9, RLENGTH - 19) }
    $1 == size { value = $col }
    END {
      if (transport != "" && transport != "tcp") {
        print "ferry bench measured the " transport " transport, not tcp: not comparable with a TCP anchor" > "/dev/stderr"
        exit 1
      }
      print value
    }'
}
