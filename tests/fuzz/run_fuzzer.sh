#!/bin/sh
# run_fuzzer.sh BINARY SECONDS WORKDIR CORPUS [MORE_SEED_DIRS...] - one libFuzzer target for SECONDS from the
# committed corpus; new inputs are written to WORKDIR/corpus (never into the source tree), crashes to
# WORKDIR/crash-* (copy them into tests/fuzz/regress/TARGET/ to replay them in every CTest run).
set -eu
bin=$1 secs=$2 work=$3
shift 3
mkdir -p "$work/corpus"
exec "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" "$@"
