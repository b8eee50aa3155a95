#!/bin/bash
# demo_gpu.sh - `omni demo` headless on a bare CUDA host (the lent H200: no display, no Debian libraries) from a
# build made here (Debian 12, CUDA 13.0). `pack` bundles the program, every shared library it loads except the C
# runtime and CUDA's own (SDL2, SDL2_ttf, cairo, FFmpeg, OpenBLAS ...) and a font; `run` reads a sample image on
# both panes with --device cuda and once on the CPU, and writes under $OUT:
#     demo_cuda.png, demo_cuda.log   A bf16 / B $KVB on the GPU (memory chart: the device's memory in use)
#     demo_cpu.png,  demo_cpu.log    the same request on the CPU (the answers must be the same text as far as the
#                                    GPU's bf16 numerics keep the greedy choices)
#   here:    app/ui/demo_gpu.sh pack build          -> build/demo-dev/ (carry build/demo-dev)
#   device:  app/ui/demo_gpu.sh run build           (from the repository root; MODEL=DIR, KVB=bf16|int2, N=tokens)
set -u
mode=${1:?pack|run}
B=${2:?build dir}
D=$B/demo-dev
OUT=${OUT:-/tmp}
if [ "$mode" = pack ]; then
    rm -rf "$D" && mkdir -p "$D/lib"
    cp "$B/omni" "$D/" && cp /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf "$D/"
    ldd "$B/omni" | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt)\.so' |
        while read -r l; do cp -L "$l" "$D/lib/"; done
    tar -C "$D" -cJf "$D/lib.tar.xz" lib && rm -rf "$D/lib"
    du -sh "$D"
    exit 0
fi
mkdir -p /tmp/omni_demo_lib && tar -C /tmp/omni_demo_lib -xJf "$D/lib.tar.xz"
CUDALIB=$(dirname "$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/omni_demo_lib/lib:$CUDALIB:${LD_LIBRARY_PATH:-} OMP_WAIT_POLICY=passive
export SDL_VIDEODRIVER=offscreen SDL_AUDIODRIVER=dummy
model=${MODEL:-tests/fixtures/audio/omni-a}
image=assets/samples/receipt.png
[ -f "$image" ] || image=tests/fixtures/vision/a_exact.png
script=$(mktemp)
printf 'wait model 600\ndrop %s\nwait media\npreset read\nwait done 600\n' "$image" > "$script"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
ldd "$D/omni" | grep "not found"
for dev in cuda cpu; do
    timeout 300 "$D/omni" demo -m "$model" --device $dev --kv-a bf16 --kv-b "${KVB:-bf16}" -n "${N:-64}" \
        --font "$D/DejaVuSans.ttf" --script "$script" --screenshot "$OUT/demo_$dev.png" \
        > "$OUT/demo_$dev.out" 2> "$OUT/demo_$dev.log"
    echo "demo --device $dev: rc=$?"
    grep -E "^demo: (model|error)|^compare:|frame time" "$OUT/demo_$dev.log"
done
cmp -s "$OUT/demo_cuda.out" "$OUT/demo_cpu.out" && echo "answers: GPU == CPU" || echo "answers: GPU != CPU (see demo_*.out)"
rm -f "$script"
