#!/usr/bin/env bash
# test_bench_report.sh - bench/report.sh end to end on the CPU (the GPU run's code path with small sizes): random
# weights of a fixture config, omni bench, the transformers baseline (its rows say why when torch is missing),
# REPORT.md with the paper's table, the chart and the CSV. Usage: test_bench_report.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
out=$(mktemp -d /tmp/omni_report_test_XXXXXX)
trap 'rm -rf "$out"' EXIT
cd "$src" || exit 1
OUT=$out CONFIG=tests/fixtures/text/qvl-h64-hd128-gqa2-tied/config.json DEVICE=cpu BATCH=1,2 CTX=48,128 STEPS=3 \
    KV_MEM=0.01 HF_POINTS=2x48,1x128 FILL_ABOVE=64 HF_LIMIT=150 OMNI_LIMIT=360 EXTRA="--bw-mib 8 -t 2 --kv-window 32" bash bench/report.sh local "$build" > "$out/stdout" 2>&1
rc=$?
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2" >&2; fail=1; fi; }
check "[ $rc -eq 0 ]" "report.sh exit $rc: $(tail -5 "$out/stdout")"
for f in REPORT.md bench.png bench.csv bench.txt transformers.csv env.txt; do
    check "[ -s '$out/$f' ]" "$f missing or empty"
done
check "grep -q '^| omni int2 |' '$out/REPORT.md'" "no int2 row in REPORT.md"
check "grep -q 'int2 vs bf16 (omni, this run) | \*\*' '$out/REPORT.md'" "no ratio row"
check "grep -q 'paper (H20): INT2 / BF16 | 4.1x' '$out/REPORT.md'" "no paper row"
check "grep -q '^| transformers generate' '$out/REPORT.md'" "no transformers row"
check "grep -q '!\[omni bench chart\](bench.png)' '$out/REPORT.md'" "chart not linked"
check "grep -q 'Contexts above 64 tokens are not prefilled' '$out/REPORT.md'" "no word on the filled contexts"
check "grep -q '^| int2  *|  *2 |  *128 | .* | *filled | *- |' '$out/bench.txt'" "the 128-token points are not filled"
check "head -1 '$out/bench.csv' | grep -q '^kind,model,device,kv,batch,ctx,steps,decode_tok_s'" "CSV header"
check "[ \$(grep -c '^point,' '$out/bench.csv') -eq 8 ]" "CSV points: $(grep -c '^point,' "$out/bench.csv")"
check "[ \$(head -c 8 '$out/bench.png' | od -An -tx1 | tr -d ' \n') = 89504e470d0a1a0a ]" "bench.png is not a PNG"
[ $fail -eq 0 ] && echo "test_bench_report: passed"
exit $fail
