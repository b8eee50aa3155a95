#!/bin/bash
# attn_gpu.sh - every GPU attention test and the attention benchmark on the H200 in one command, from binaries
# built here (Debian 12, CUDA 13.0). The device image has CUDA (cudart) and torch but not our host libraries
# (OpenBLAS, libgfortran, libgomp), so `pack` bundles those next to the binaries.
#   here:    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOMNI_CUDA=ON && cmake --build build -j2 \
#              --target test_gpu_kv_attn test_gpu_kv_quant test_gpu_kv_prefill omni_bench_attn
#            bench/attn_gpu.sh pack build            -> build/dev-attn/ (~10 MB; carry it)
#   device:  bench/attn_gpu.sh run build [tests] [quick] [sanitize] [bench] [ncu]   (repo root; logs + CSVs in $OUT/attn_logs.tgz;
#            no part named = all three, ~10 min: split into "tests sanitize" (~6 min) and "bench" (~4 min) calls
#            to stay inside one call's 10-minute limit)
# parts: tests = decode (--full: every case also under each kernel configuration of OMNI_KVC_CONFIGS or the
# test's default list; --short with OMNI_KVC_MAGIC=1), prefill/segments, quantizer; quick = the decode test's
# short cases under every configuration; sanitize = compute-sanitizer
# memcheck and racecheck on the --tiny cases; bench = omni_bench_attn (validates, then times ours: bf16 / int2 /
# int4 / kivi2 under every configuration of CFGS, with a device copy), bench/sdpa_bench.py (torch SDPA, same
# shapes) and the tables (bench/attn_table.py: configuration matrix + winner, the issue-10 table, targets);
# ncu = hardware counters (dram, issue, occupancy, stall reasons per issued instruction) of the split kernel
# (NCU_KERNEL regex, default kvc_split; "kvc_" with NCU_COUNT=2 takes the combine too) for each format of
# NCU_FMTS (default int2) x configuration of NCU_CFGS (default "base,x2b3") x shape of NCU_SHAPES; NCU_SECTIONS
# adds ncu sections (e.g. "--section SourceCounters").
# Environment: CFGS (default below), NCU_CFGS, TABLE_CFG (the table's configuration; default
# the int2 winner), SDPA=0 (no torch run), DECODE_ONLY=1 (tests / sanitize: the decode kernel's only), NCU_SHAPES
# (default "1x131072 48x4096").
set -u
mode=${1:?pack|run}
B=${2:?build dir}
D=$B/dev-attn
OUT=${OUT:-/tmp/attn_out}
BINS="test_gpu_kv_attn test_gpu_kv_quant test_gpu_kv_prefill omni_bench_attn"
if [ "$mode" = pack ]; then
    rm -rf $D && mkdir -p $D/lib
    for b in $BINS; do [ -f $B/tests/gpu/$b ] && cp $B/tests/gpu/$b $D/; done
    for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libgomp.so.1; do
        f=$(for b in $D/test_*; do ldd $b; done | awk -v l=$l '$1 == l {print $3}' | head -1)
        [ -n "$f" ] && cp -L "$f" $D/lib/
    done
    tar -C $D -cJf $D/lib.tar.xz lib && rm -rf $D/lib
    du -sh $D
    exit 0
fi
RES=$OUT                      # what comes back: one tarball of the logs (the device returns at most 8 files)
OUT=$RES/logs
mkdir -p $OUT /tmp/omni_lib && tar -C /tmp/omni_lib -xJf $D/lib.tar.xz
trap 'tar -C $OUT -czf $RES/attn_logs.tgz . && rm -rf $OUT' EXIT
CUDALIB=$(dirname "$(find /usr/local/cuda*/ /usr/local /usr/lib /opt -name 'libcudart.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader | tee $OUT/gpu.txt
ldd $D/test_gpu_kv_attn | grep "not found"
status=""
step() { # name timeout command...: runs, logs to $OUT/name.log, records rc (skipped: binary not packed)
    local name=$1 t=$2
    shift 2
    local bin
    for bin in "$@"; do case $bin in $D/*) [ -x $bin ] || { status="$status$name: not packed\n"; return; } ;; esac; done
    local t0=$(date +%s)
    timeout $t "$@" > $OUT/$name.log 2>&1
    local rc=$?
    status="$status$(printf '%-22s rc %3d  %4d s  %s' $name $rc $(($(date +%s) - t0)) "$(grep -h 'passed,' $OUT/$name.log | tail -1)")\n"
    echo "== $name rc=$rc"
    grep -h "FAIL\|ERROR SUMMARY\|passed,\|DEADLOCK\|error" $OUT/$name.log | head -20
}
parts=${*:3}
[ -z "$parts" ] && parts="tests sanitize bench"
CFGS=${CFGS:-base,base:w2,q4r1,q4r1:w2,q3r2,q2r1,q6r3,q4r1:c3,x2,x2b3,x2b3:w2,p1,base:m}
NCU_CFGS=${NCU_CFGS:-base,x2b3}
DECODE_ONLY=${DECODE_ONLY:-0} # 1: the decode kernel's tests and sanitizer runs only (prefill / quantizer unchanged)
if [[ " $parts " == *" tests "* ]]; then
    step test_decode 300 $D/test_gpu_kv_attn --full
    OMNI_KVC_MAGIC=1 OMNI_KVC_CONFIGS= step test_decode_magic 120 $D/test_gpu_kv_attn --short
    [ "$DECODE_ONLY" = 1 ] || step test_prefill 200 $D/test_gpu_kv_prefill
    [ "$DECODE_ONLY" = 1 ] || step test_quant 60 $D/test_gpu_kv_quant
fi
if [[ " $parts " == *" quick "* ]]; then # the decode test's short cases under every configuration (~20 s)
    step test_decode_short 120 $D/test_gpu_kv_attn --short
fi
if [[ " $parts " == *" sanitize "* ]]; then
    SAN="compute-sanitizer --report-api-errors no --error-exitcode 1"
    step memcheck_decode 150 $SAN --tool memcheck $D/test_gpu_kv_attn --tiny
    [ "$DECODE_ONLY" = 1 ] || step memcheck_prefill 150 $SAN --tool memcheck $D/test_gpu_kv_prefill --tiny
    step racecheck_decode 150 $SAN --tool racecheck $D/test_gpu_kv_attn --tiny
    [ "$DECODE_ONLY" = 1 ] || step racecheck_prefill 150 $SAN --tool racecheck $D/test_gpu_kv_prefill --tiny
fi
if [[ " $parts " == *" bench "* ]]; then
    OMNI_KVC_CONFIGS=$CFGS step bench 300 $D/omni_bench_attn $OUT/bench.csv
    if [ "${SDPA:-1}" = 1 ]; then
        timeout 200 python3 bench/sdpa_bench.py > $OUT/sdpa.csv 2> $OUT/sdpa.log
        echo "== sdpa rc=$?"
        cat $OUT/sdpa.log
        echo
    fi
fi
if [[ " $parts " == *" ncu "* ]]; then
    # dram throughput, issue-slot use, occupancy, registers, stall reasons of one int2 split launch after warm-up
    METRICS=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
    METRICS=$METRICS,dram__bytes_read.sum.per_second,sm__inst_issued.avg.pct_of_peak_sustained_active
    METRICS=$METRICS,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
    METRICS=$METRICS,sm__maximum_warps_per_active_cycle_pct,launch__registers_per_thread
    METRICS=$METRICS,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
    METRICS=$METRICS,launch__shared_mem_per_block_dynamic,launch__grid_size,smsp__inst_executed.sum
    METRICS=$METRICS,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct
    # (no --section WarpStateStats / SchedulerStats: ncu then lists the stall metrics inside those sections' tables,
    # which print only their summary lines, so the per-reason values never reached the log - session 4)
    METRICS=$METRICS,smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active
    METRICS=$METRICS,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
    METRICS=$METRICS,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
    for r in long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait barrier membar lg_throttle \
        dispatch_stall not_selected selected no_instruction branch_resolving tex_throttle drain sleeping misc; do
        METRICS=$METRICS,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
    done
    for fmt in ${NCU_FMTS:-int2}; do
        for cfg in ${NCU_CFGS//,/ }; do
            for shape in ${NCU_SHAPES:-1x131072 48x4096}; do
                OMNI_KVC_CONFIGS=$cfg OMNI_BENCH_ONLY=$fmt OMNI_BENCH_SHAPE=$shape step ncu_${fmt}_${cfg//:/_}_$shape 150 \
                    ncu --clock-control none --kernel-name regex:${NCU_KERNEL:-kvc_split} --launch-skip 10 \
                    --launch-count ${NCU_COUNT:-1} ${NCU_SECTIONS:-} --metrics $METRICS $D/omni_bench_attn
            done
        done
    done
fi
printf "$status"
for f in $OUT/ncu_*.log; do
    [ -f "$f" ] || continue
    echo "== $(basename $f .log)"
    grep -E "^  (void )?kvc_|^ +(gpu__time|dram__|sm__inst_issued|smsp__issue_active|sm__warps_active|sm__maximum_warps|launch__reg|launch__occupancy|launch__shared|launch__grid|smsp__inst_executed|sm__cycles_elapsed|lts__t_sector_hit|smsp__average_warps_issue_stalled)|Warp Cycles Per Issued|Eligible|Active Warps Per|Issued Warp" "$f" \
        | sed 's/  */ /g; s/smsp__average_warps_issue_stalled_/stall_/; s/_per_issue_active.ratio//' | awk '$NF != "0" && $NF != "0.00"' | head -60
    grep -E "^ +(smsp__warps_|l1tex__data_pipe|sm__pipe_tensor)" "$f" | sed 's/  */ /g' | head -8
done
[ -f $OUT/bench.csv ] && python3 bench/attn_table.py $OUT/bench.csv $OUT/sdpa.csv ${TABLE_CFG:-}
[ -f $OUT/bench.log ] && grep -h "^prefill\|^segments" $OUT/bench.log
exit 0
