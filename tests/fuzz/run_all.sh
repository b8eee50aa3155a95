#!/bin/bash
# run_all.sh - build, pack and run every libFuzzer target of tests/fuzz in parallel (tests/fuzz/README.md).
#
#   here (Debian 12, clang):
#     tests/fuzz/run_all.sh build [DIR] [ffmpeg=on|off]   clang + ASan/UBSan + libFuzzer build of the targets
#                                                         (default DIR build-fuzz, FFmpeg on)
#     tests/fuzz/run_all.sh pack [DIR]                    DIR/fuzzpack/: binaries, corpus, regression inputs,
#                                                         the tokenizer, these scripts, the shared libraries the
#                                                         binaries need except glibc/libstdc++ (lib.tar.xz);
#                                                         all of it in one DIR/fuzzpack.tar.xz
#   anywhere (here, or a bare x86-64 host with the pack carried, e.g. the GPU host):
#     tests/fuzz/run_all.sh run SECONDS [JOBS] [DIR]      every target at once for SECONDS with JOBS worker
#                                                         processes in all (default: all cores), slower targets
#                                                         getting more, at nice ${NICE:-10}; writes three files
#                                                         under $OUT (default DIR/fuzz-out): summary.txt (per
#                                                         target executions, exec/s, findings; EXECS lines),
#                                                         fuzz-corpus.tar.xz (the new corpus inputs, <= 15 MiB),
#                                                         fuzz-found.tar.xz (crash/timeout/OOM inputs, reports)
#                                                         FUZZ_WORKERS="image=4 config=2": only those targets, with
#                                                         those worker counts
# DIR for run: a build dir (tests/fuzz/fuzz_* inside) or a pack (fuzz_* at its top). The summary gives, per
# target: workers, total executions, exec/s, new corpus files, crashes/timeouts/OOMs/leaks. Exit status 1 when
# anything was found: copy those files into tests/fuzz/regress/TARGET/ (fix first) so CTest replays them.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
TARGETS="safetensors config tokenizer_load tokenizer_encode image audio chat_line args server_request model_path demo_script"
# relative cost per execution (measured on the seeds): slower targets get more of the workers
weight() { case $1 in audio|image|tokenizer_encode) echo 3 ;; tokenizer_load|safetensors|config) echo 2 ;; *) echo 1 ;; esac; }
# -max_len per target. tokenizer_encode: 256 bytes. Its cost grows with the length (~1.6 us a byte under
# ASan), and the BPE state spans one pre-tokenizer piece (a letter run, a digit, a whitespace or
# punctuation run), one normalization run or one added token: 256 bytes hold dozens of them, pieces longer than
# the 64-symbol BPE scratch, and every UTF-8 form (the per-call piece cache starts at 4096 bytes: not reached
# at 1024 either). Media and tokenizer.json: 16 KiB (headers, chunks, small frames). model_path: 4 KiB (paths).
maxlen() {
    case $1 in tokenizer_encode) echo 256 ;; image|audio|tokenizer_load) echo 16384 ;; model_path) echo 4096 ;;
    *) echo 65536 ;; esac
}
mode=${1:-}

case "$mode" in
build)
    dir=${2:-build-fuzz}
    ff=${3:-on}
    FF=ON; [ "$ff" = off ] && FF=OFF
    cd "$HERE/../.."
    CC=clang cmake -S . -B "$dir" -DOMNI_FUZZ=ON -DOMNI_SANITIZE=ON -DOMNI_TESTS=OFF -DOMNI_CUDA=OFF -DOMNI_UI=OFF \
        -DOMNI_FFMPEG=$FF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
    t=""
    for x in $TARGETS; do t="$t fuzz_$x"; done
    cmake --build "$dir" -j"$(nproc)" --target $t || exit 1
    ls -la "$dir"/tests/fuzz/fuzz_* | grep -v "\.sh"
    ;;
pack)
    dir=${2:-build-fuzz}
    cd "$HERE/../.."
    p=$dir/fuzzpack
    rm -rf "$p" && mkdir -p "$p/lib" "$p/data"
    for x in $TARGETS; do cp "$dir/tests/fuzz/fuzz_$x" "$p/" || exit 1; done
    cp -r tests/fuzz/corpus tests/fuzz/regress "$p/"
    cp tests/fixtures/tok-small/tokenizer.json "$p/data/"
    cp tests/fuzz/run_all.sh tests/fuzz/run_fuzzer.sh "$p/"
    # every shared library but the C runtime (the host's glibc and libstdc++ are newer: Ubuntu 24.04)
    for b in "$p"/fuzz_*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -v -E "/(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so" |
        while read -r l; do cp -L "$l" "$p/lib/"; done
    tar -C "$p" -cJf "$p/lib.tar.xz" lib && rm -rf "$p/lib"
    tar -C "$dir" -cJf "$dir/fuzzpack.tar.xz" fuzzpack # one file to carry (~11 MB)
    du -sh "$p" "$dir/fuzzpack.tar.xz"
    echo "carry $dir/fuzzpack.tar.xz; on the host: tar -C /tmp -xJf fuzzpack.tar.xz &&" \
        "OUT=\$OUT/fuzz bash /tmp/fuzzpack/run_all.sh run SECONDS JOBS /tmp/fuzzpack"
    ;;
run)
    secs=${2:?seconds}
    jobs=${3:-$(nproc)}
    dir=${4:-build-fuzz}
    [ -d "$dir/tests/fuzz" ] && bin=$dir/tests/fuzz || bin=$dir
    bin=$(cd "$bin" && pwd)
    out=${OUT:-$dir/fuzz-out}
    mkdir -p "$out" && out=$(cd "$out" && pwd)
    # the work (corpus, logs, artifacts) stays outside $OUT: only three files go there (a device returns few)
    work=$(mktemp -d "${TMPDIR:-/tmp}/omni_fuzz.XXXXXX")
    # the targets' scratch files (safetensors, audio, model_path write files on every input): in memory when the
    # host has /dev/shm (a disk file system's journal makes each input several times slower), else with the rest
    scratch=$(mktemp -d /dev/shm/omni_fuzz_tmp.XXXXXX 2>/dev/null) || { scratch=$work/tmp && mkdir -p "$scratch"; }
    export TMPDIR=$scratch
    if [ -f "$bin/lib.tar.xz" ]; then # a pack: its libraries, its tokenizer, its seeds
        tar -C "$work" -xJf "$bin/lib.tar.xz"
        export LD_LIBRARY_PATH=$work/lib:${LD_LIBRARY_PATH:-}
        seeds=$bin
    else
        seeds=$HERE
    fi
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
    # one thread per worker process: the workers are the parallelism (OpenMP in the image resize would start a
    # team of nproc spinning threads in each of them)
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
    sum=0
    for x in $TARGETS; do sum=$((sum + $(weight $x))); done
    # FUZZ_WORKERS="safetensors=3 image=2 ...": only these targets, with these worker counts (JOBS is then unused)
    if [ -n "${FUZZ_WORKERS:-}" ]; then
        TARGETS=$(for kv in $FUZZ_WORKERS; do echo -n "${kv%%=*} "; done)
        jobs=0; for kv in $FUZZ_WORKERS; do jobs=$((jobs + ${kv#*=})); done
    fi
    echo "fuzz: $secs s, $jobs workers, $(nproc) cores, $(uname -n), $(date -u +%FT%TZ)" | tee "$out/summary.txt"
    pids=""
    t0=$(date +%s)
    for x in $TARGETS; do
        w=$(( jobs * $(weight $x) / sum )); [ $w -lt 1 ] && w=1
        for kv in ${FUZZ_WORKERS:-}; do [ "${kv%%=*}" = "$x" ] && w=${kv#*=}; done
        echo "$x $w" >> "$work/workers.txt"
        mkdir -p "$work/$x/corpus" "$work/$x/artifacts"
        # fork mode: w child processes; timeout stops the whole process group (children too) when the last
        # jobs overrun (each fork job runs up to a few minutes); the counts come from the last progress line
        ( cd "$work/$x" && nice -n "${NICE:-10}" timeout -k 5 $((secs + 30)) "$bin/fuzz_$x" -fork=$w \
            -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -max_total_time="$secs" -timeout=10 \
            -rss_limit_mb=2048 -max_len="$(maxlen $x)" -print_final_stats=1 -artifact_prefix="$work/$x/artifacts/" \
            "$work/$x/corpus" "$seeds/corpus/$x" "$seeds/regress/$x" > "$work/$x/log.txt" 2>&1 ) &
        pids="$pids $!"
    done
    wait $pids
    el=$(( $(date +%s) - t0 ))
    found=0
    printf "%-18s %7s %14s %10s %8s %s\n" target workers executions exec/s new found | tee -a "$out/summary.txt"
    mkdir -p "$work/pack/corpus" "$work/pack/found"
    for x in $TARGETS; do
        w=$(awk -v t=$x '$1 == t {print $2}' "$work/workers.txt")
        last=$(grep -E "^#[0-9]+: cov:" "$work/$x/log.txt" | tail -1)
        n=$(echo "$last" | sed -E 's/^#([0-9]+):.*/\1/')
        rate=$(echo "$last" | sed -E 's/.*exec\/s:? ([0-9]+).*/\1/')
        # new corpus files: those whose content is not a seed's (libFuzzer names files by their SHA-1)
        sha1sum "$seeds"/corpus/$x/* "$seeds"/regress/$x/* 2>/dev/null | awk '{print $1}' | sort -u > "$work/seed.sha"
        mkdir -p "$work/pack/corpus/$x"
        for c in "$work/$x/corpus"/*; do
            [ -f "$c" ] || continue
            h=$(sha1sum "$c" | awk '{print $1}')
            grep -qx "$h" "$work/seed.sha" || cp "$c" "$work/pack/corpus/$x/$h"
        done
        new=$(ls "$work/pack/corpus/$x" | wc -l)
        arts=$(ls "$work/$x/artifacts" 2>/dev/null | wc -l)
        leaks=$(grep -c "ERROR: LeakSanitizer" "$work/$x/log.txt")
        errs=$(grep -c -E "ERROR: (AddressSanitizer|libFuzzer)|runtime error:|fuzz invariant failed" "$work/$x/log.txt")
        if [ "$arts" -gt 0 ] || [ "$leaks" -gt 0 ] || [ "$errs" -gt 0 ]; then
            found=1
            mkdir -p "$work/pack/found/$x"
            cp "$work/$x/artifacts"/* "$work/pack/found/$x/" 2>/dev/null
            # the reports (each with its stack), not the whole log
            grep -n -B2 -A40 -E "ERROR: |runtime error:|fuzz invariant failed" "$work/$x/log.txt" | head -3000 \
                > "$work/pack/found/$x/reports.txt"
            # fork mode keeps only the "ERROR:" lines of a crashed job: run each artifact again alone, here, for
            # its whole report (or to show that it does not reproduce)
            for a in "$work/$x/artifacts"/*; do
                [ -f "$a" ] || continue
                echo "=== replay of $(basename "$a") on $(uname -n)" >> "$work/pack/found/$x/replay.txt"
                (cd "$work/$x" && timeout -k 5 60 "$bin/fuzz_$x" -runs=3 -rss_limit_mb=2048 "$a" 2>&1 | tail -80) \
                    >> "$work/pack/found/$x/replay.txt"
            done
        fi
        tail -5 "$work/$x/log.txt" > "$work/pack/found/$x.log-tail.txt" 2>/dev/null
        printf "%-18s %7s %14s %10s %8s %s\n" "$x" "$w" "${n:-?}" "${rate:-?}" "$new" \
            "$arts artifacts, $leaks leak reports, $errs error lines" | tee -a "$out/summary.txt"
        echo "EXECS $x ${n:-0} ${el}s $w workers" >> "$work/execs.txt"
    done
    cat "$work/execs.txt" >> "$out/summary.txt"
    # the new corpus (<= 15 MiB compressed; else the largest files of the largest target are dropped)
    while :; do
        tar -C "$work/pack" -cJf "$out/fuzz-corpus.tar.xz" corpus
        [ "$(stat -c %s "$out/fuzz-corpus.tar.xz")" -le $((15 << 20)) ] && break
        big=$(du -s "$work/pack/corpus"/* | sort -n | tail -1 | cut -f2)
        ls -S "$big" | head -n $(( $(ls "$big" | wc -l) / 4 + 1 )) | while read -r f; do rm -f "$big/$f"; done
        echo "corpus over 15 MiB: dropped the largest quarter of $big" | tee -a "$out/summary.txt"
    done
    tar -C "$work/pack" -cJf "$out/fuzz-found.tar.xz" found
    echo "files: summary.txt, fuzz-corpus.tar.xz (new inputs per target), fuzz-found.tar.xz (artifacts," \
        "reports, log tails); $el s wall" | tee -a "$out/summary.txt"
    rm -rf "$work" "$scratch"
    exit $found
    ;;
*)
    sed -n '2,22p' "$0"
    exit 1
    ;;
esac
