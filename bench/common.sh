# Helpers shared by the benchmark scripts (sourced, not run).

# The TCP benchmarks run both engines on this host, which would otherwise
# pick the local transport.
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

# The value of column $2 in the row whose first field is $1, from `ferry bench` table output on stdin.
table_value() { awk -v size="$1" -v col="$2" '$1 == size { print $col }'; }
