#!/bin/bash
# run_all.sh - build, pack and run every libFuzzer target of tests/fuzz in parallel (tests/fuzz/README.md).
#
#   here (Debian 12, clang):
#     tests/fuzz/run_all.sh build [DIR] [ffmpeg=on|off]   clang + ASan/UBSan + libFuzzer build of the targets
#                                                         (default DIR build-fuzz, FFmpeg on)
#     tests/fuzz/run_all.sh pack [DIR]                    DIR/fuzzpack/: binaries, corpus, regression inputs,
#                                                         the tokenizer, these scripts, the shared libraries the
#                                                         binaries need except glibc/libstdc++ (lib.tar.xz)
#   anywhere (here, or a bare x86-64 host with the pack carried, e.g. the GPU host):
#     tests/fuzz/run_all.sh run SECONDS [JOBS] [DIR]      every target at once for SECONDS with JOBS worker
#                                                         processes in all (default: all cores), slower targets
#                                                         getting more; summary.txt and fuzz-results.tar.xz
#                                                         (logs, new corpus, crash files) under $OUT
#                                                         (default DIR/fuzz-out)
# DIR for run: a build dir (tests/fuzz/fuzz_* inside) or a pack (fuzz_* at its top). The summary gives, per
# target: workers, total executions, exec/s, new corpus files, crashes/timeouts/OOMs/leaks. Exit status 1 when
# anything was found: copy those files into tests/fuzz/regress/TARGET/ (fix first) so CTest replays them.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
TARGETS="safetensors config tokenizer_load tokenizer_encode image audio chat_line args server_request"
# relative cost per execution (measured on the seeds): slower targets get more of the workers
weight() { case $1 in audio) echo 6 ;; image|tokenizer_encode) echo 3 ;; tokenizer_load|safetensors|config) echo 2 ;; *) echo 1 ;; esac; }
maxlen() { case $1 in tokenizer_encode) echo 1024 ;; image|audio|tokenizer_load) echo 16384 ;; *) echo 65536 ;; esac; }
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
    du -sh "$p"
    echo "carry $p; on the host: bash $p/run_all.sh run SECONDS JOBS $p   (logs under \$OUT)"
    ;;
run)
    secs=${2:?seconds}
    jobs=${3:-$(nproc)}
    dir=${4:-build-fuzz}
    [ -d "$dir/tests/fuzz" ] && bin=$dir/tests/fuzz || bin=$dir
    bin=$(cd "$bin" && pwd)
    out=${OUT:-$dir/fuzz-out}
    mkdir -p "$out" && out=$(cd "$out" && pwd)
    if [ -f "$bin/lib.tar.xz" ]; then # a pack: its libraries, its tokenizer, its seeds
        mkdir -p /tmp/omni_fuzz_lib && tar -C /tmp/omni_fuzz_lib -xJf "$bin/lib.tar.xz"
        export LD_LIBRARY_PATH=/tmp/omni_fuzz_lib/lib:${LD_LIBRARY_PATH:-}
        seeds=$bin
    else
        seeds=$HERE
    fi
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
    sum=0
    for x in $TARGETS; do sum=$((sum + $(weight $x))); done
    echo "fuzz: $secs s, $jobs workers, $(nproc) cores, $(date -u +%FT%TZ)" | tee "$out/summary.txt"
    pids=""
    rm -f "$out/workers.txt.new"
    for x in $TARGETS; do
        w=$(( jobs * $(weight $x) / sum )); [ $w -lt 1 ] && w=1
        echo "$x $w" >> "$out/workers.txt.new"
        mkdir -p "$out/$x/corpus" "$out/$x/artifacts"
        ( cd "$out/$x" && "$bin/fuzz_$x" -fork=$w -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
            -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len="$(maxlen $x)" -print_final_stats=1 \
            -artifact_prefix="$out/$x/artifacts/" "$out/$x/corpus" "$seeds/corpus/$x" "$seeds/regress/$x" \
            > "$out/$x/log.txt" 2>&1 ) &
        pids="$pids $!"
    done
    wait $pids
    mv "$out/workers.txt.new" "$out/workers.txt"
    found=0
    printf "%-18s %7s %14s %10s %8s %s\n" target workers executions exec/s corpus found | tee -a "$out/summary.txt"
    for x in $TARGETS; do
        w=$(awk -v t=$x '$1 == t {print $2}' "$out/workers.txt")
        last=$(grep -E "^#[0-9]+: cov:" "$out/$x/log.txt" | tail -1)
        n=$(echo "$last" | sed -E 's/^#([0-9]+):.*/\1/')
        rate=$(echo "$last" | sed -E 's/.*exec\/s:? ([0-9]+).*/\1/')
        corp=$(ls "$out/$x/corpus" | wc -l)
        arts=$(ls "$out/$x/artifacts" 2>/dev/null | wc -l)
        leaks=$(grep -c "ERROR: LeakSanitizer" "$out/$x/log.txt")
        [ "$arts" -gt 0 ] || [ "$leaks" -gt 0 ] && found=1
        printf "%-18s %7s %14s %10s %8s %s\n" "$x" "$w" "${n:-?}" "${rate:-?}" "$corp" \
            "$arts files, $leaks leak reports" | tee -a "$out/summary.txt"
    done
    echo "artifacts (crash-*, timeout-*, oom-*): TARGET/artifacts/ in fuzz-results.tar.xz" | tee -a "$out/summary.txt"
    # one archive (logs, new corpus, artifacts) beside summary.txt: a device returns only a few files
    (cd "$out" && tar -cJf fuzz-results.tar.xz workers.txt $TARGETS && rm -rf $TARGETS workers.txt)
    exit $found
    ;;
*)
    sed -n '2,22p' "$0"
    exit 1
    ;;
esac
