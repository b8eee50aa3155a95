#!/usr/bin/env bash
# report.sh - bench/REPORT.md from one run: `omni bench` on random weights of a real config (BF16 vs INT2: the
# paper's efficiency table with % of roofline, the chart, the CSV) and, in the same run, transformers' generate on
# random weights of the same config (the "what users would run otherwise" row, bench/hf_generate.py).
#
#   here (Debian):  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DOMNI_CUDA=ON -DOMNI_FFMPEG=OFF -DOMNI_UI=OFF
#                   cmake --build build-gpu -j --target omni
#                   bash bench/report.sh pack build-gpu   -> build-gpu/report/ (omni + its libraries + the font, ~20 MB;
#                                                           carry it to the GPU host)
#   on the GPU host (repo root): bash bench/report.sh run build-gpu    -> $OUT/REPORT.md, bench.png, bench.csv, ...
#   anywhere build/omni runs:    bash bench/report.sh local build      (the CPU test uses this with small sizes)
#
# Settings (environment; defaults are the H200 run of the paper's table):
#   CONFIG    assets/configs/Qwen3-VL-8B-Instruct/config.json   DEVICE  cuda
#   KV        bf16,int2           BATCH  1,48          CTX  4K,32K,128K      STEPS  16 (decode steps per point)
#   FITS_KV   int4,int2:w32 (formats counted for sequences that fit only; "none": no more)
#   FILL_ABOVE 32K (contexts above it: random K/V appended through the cache instead of the prefill - a 128K prefill
#             costs ~50 s per format on the H200; "0": prefill every context)
#   KV_MEM    30 (GiB of KV: points needing more are skipped; the fits-count budget; a count above the 256
#             sequences the CUDA attention takes per call is reported as ">= 256" with that reason)
#   HF_POINTS 48x4K,1x4K (transformers points; "none" to skip)   PYTHON  python3
#   HF_LIMIT  50, OMNI_LIMIT 100: seconds each part may take (then it stops, keeping what it measured: omni bench
#             is sent SIGINT and writes its outputs from the points done, exit 130; hf_generate keeps its rows);
#             the defaults keep a run under ~150 s on the H200 (call D: transformers 31 s, omni bench 43 s)
#   EXTRA     more omni bench options (e.g. "-t 16")
#   REPORT_NOTE a paragraph appended to REPORT.md's "This run" section (default: what the short defaults leave out)
# Output under $OUT (default /tmp/omni_report): REPORT.md, bench.png, bench.csv, bench.txt (the table), bench.log
# (omni's stderr), transformers.csv + transformers.log, env.txt (incl. the seconds each part took). Exit status:
# omni bench's.
set -u
mode=${1:?pack|run|local}
B=${2:?build dir}
D=$B/report
OUT=${OUT:-/tmp/omni_report}
CONFIG=${CONFIG:-assets/configs/Qwen3-VL-8B-Instruct/config.json}
DEVICE=${DEVICE:-cuda}
KV=${KV:-bf16,int2}
BATCH=${BATCH:-1,48}
CTX=${CTX:-4K,32K,128K}
STEPS=${STEPS:-16}
KV_MEM=${KV_MEM:-30}
HF_POINTS=${HF_POINTS:-48x4K,1x4K}
FITS_KV=${FITS_KV:-int4,int2:w32}
FILL_ABOVE=${FILL_ABOVE:-32K}
HF_LIMIT=${HF_LIMIT:-50}
OMNI_LIMIT=${OMNI_LIMIT:-100}
hf_note="transformers at $HF_POINTS only, capped at $HF_LIMIT s (points it did not finish say so)"
[ "$HF_POINTS" = none ] && hf_note="no transformers baseline"
REPORT_NOTE=${REPORT_NOTE-Kept short: $STEPS decode steps per point; contexts above $FILL_ABOVE tokens decoded \
after random K/V appended through the cache (not prefilled); $hf_note.}
PYTHON=${PYTHON:-python3}
EXTRA=${EXTRA:-}

if [ "$mode" = pack ]; then # omni plus every library it needs that is not glibc or CUDA (the host has those)
    mkdir -p $D/lib
    cp $B/omni $D/
    ldd $B/omni | awk '$3 ~ /^\// {print $3}' | while read -r l; do
        case $(basename "$l") in
        libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*) ;; # the host's are newer
        libcuda.so*|libcudart*|libcublas*|libnvidia*) ;;                                       # the host's CUDA
        *) cp -L "$l" $D/lib/ ;;
        esac
    done
    cp /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf $D/ 2>/dev/null
    tar -C $D -cJf $D/lib.tar.xz lib && rm -rf $D/lib
    du -sh $D
    exit 0
fi

mkdir -p "$OUT"
if [ "$mode" = run ]; then
    mkdir -p /tmp/omni_report_lib && tar -C /tmp/omni_report_lib -xJf $D/lib.tar.xz
    CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
    export LD_LIBRARY_PATH=/tmp/omni_report_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-}
    [ -f $D/DejaVuSans.ttf ] && export OMNI_FONT=$D/DejaVuSans.ttf
    OMNI=$D/omni
else
    OMNI=$B/omni
fi
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv 2>/dev/null
    $OMNI --version
    ldd $OMNI | grep "not found"
} > "$OUT/env.txt" 2>&1
DEVICE_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ "$DEVICE" = cpu ] && DEVICE_NAME=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')

# 1. transformers' generate on random weights of the same config (first: it leaves the GPU to omni afterwards)
HF=$OUT/transformers.csv
if [ "$HF_POINTS" = none ]; then
    HF=""
elif command -v "$PYTHON" >/dev/null 2>&1; then
    t0=$SECONDS
    timeout -k 10 "$HF_LIMIT" "$PYTHON" bench/hf_generate.py --config "$CONFIG" --points "$HF_POINTS" \
        --steps "$STEPS" --device "$DEVICE" --out "$HF" 2> "$OUT/transformers.log"
    echo "transformers: exit $?, $((SECONDS - t0)) s (limit $HF_LIMIT)" >> "$OUT/env.txt"
    [ -s "$HF" ] || { echo "error: bench/hf_generate.py wrote nothing (see transformers.log)" >&2; HF=""; }
else
    count() { case $1 in *[kK]) echo $((${1%?} * 1024)) ;; *[mM]) echo $((${1%?} * 1048576)) ;; *) echo "$1" ;; esac; }
    echo "kind,batch,ctx,steps,decode_tok_s,step_ms,prefill_tok_s,ttft_ms,peak_mib,note" > "$HF"
    for p in ${HF_POINTS//,/ }; do
        echo "baseline,$(count "${p%%x*}"),$(count "${p##*x}"),$STEPS,,,,,,error: $PYTHON not found" >> "$HF"
    done
fi

# 2. omni bench: table on stdout, progress on stderr, CSV, chart, REPORT.md (with the baseline row)
FITS=""
[ "$FITS_KV" = none ] || FITS="--fits-kv $FITS_KV"
t0=$SECONDS
timeout -s INT -k 30 "$OMNI_LIMIT" $OMNI bench --random "$CONFIG" --device "$DEVICE" --kv "$KV" $FITS \
    --fill-above "$FILL_ABOVE" \
    --batch "$BATCH" --ctx "$CTX" -n "$STEPS" --kv-mem "$KV_MEM" --csv "$OUT/bench.csv" --png "$OUT/bench.png" \
    --report "$OUT/REPORT.md" ${HF:+--baseline "$HF"} ${DEVICE_NAME:+--device-name "$DEVICE_NAME"} $EXTRA \
    > "$OUT/bench.txt" 2> "$OUT/bench.log"
rc=$?
echo "omni bench: exit $rc, $((SECONDS - t0)) s (limit $OMNI_LIMIT)" >> "$OUT/env.txt"
if [ -s "$OUT/REPORT.md" ]; then # what this run measured and cut, from the same run (appended to the report)
    {
        echo
        echo "## This run"
        echo
        echo "Settings (bench/report.sh): KV=$KV, FITS_KV=$FITS_KV, BATCH=$BATCH, CTX=$CTX, STEPS=$STEPS decode steps per"
        echo "point, FILL_ABOVE=$FILL_ABOVE, KV_MEM=$KV_MEM GiB, transformers points $HF_POINTS (limit $HF_LIMIT s),"
        echo "omni bench limit $OMNI_LIMIT s. Parts: $(grep -E '^(transformers|omni bench):' "$OUT/env.txt" | tr '\n' ';' | sed 's/;$//')."
        [ -n "${REPORT_NOTE:-}" ] && echo && echo "$REPORT_NOTE"
    } >> "$OUT/REPORT.md"
fi
cat "$OUT/bench.txt"
tail -3 "$OUT/bench.log"
echo "report.sh: omni bench exit $rc; wrote $(ls "$OUT" | tr '\n' ' ')"
exit $rc
