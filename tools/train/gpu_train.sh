#!/usr/bin/env bash
# gpu_train.sh [MINUTES] [RESUME_DIR] [MODELS] - train the embedded models at the same time on one GPU.
#
# Run from the repository root on the GPU host (one H200, 16 cores, python3 with torch + transformers 5.17), with
# the ignored folder .train/ carried (tools/train/prepare_carry.sh fills it here: espeak-ng .debs + pcaudio stub):
#     bash tools/train/gpu_train.sh 7                          # fresh start of ocr + speech, 7 minutes each
#     bash tools/train/gpu_train.sh 7 assets/models            # resume from DIR/{ocr,speech} (those present)
#     bash tools/train/gpu_train.sh 7 .train/resume            # ... or from DIR/models.tar.xz.part* (an earlier $OUT)
#     bash tools/train/gpu_train.sh 6 "" ocr,speech,text       # MODELS: any of ocr, speech, text (default ocr,speech)
# Whole run = MINUTES + about 1 minute (start, held-out evaluation, packing); each model is killed at
# MINUTES*60+90 s at the latest. Writes under $OUT (default /tmp/omni-train-out), at most 5 files:
#     train_log.txt          this script's output (progress lines of the trainings, summary) + the full logs
#     summary.json           per model: steps, seconds, final loss, held-out evaluation
#     models.tar.xz.partNN   the models' checkpoint folders (bf16 safetensors + configs + tokenizer +
#                            training_recipe.json), xz, in <16 MiB parts: cat models.tar.xz.part* | tar -xJ -C DEST
# TOY=1 runs tiny models for a few steps on the CPU (to test this script; MINUTES then is the training budget).
set -u
M=${1:-7}
RESUME=${2:-}
MODELS=${3:-ocr,speech}
OUT=${OUT:-/tmp/omni-train-out}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
W=${TRAIN_WORK:-/tmp/omni-train}
rm -rf "$W"
mkdir -p "$W/run"
exec > >(tee "$OUT/train_log.txt") 2>&1

echo "gpu_train: $(date -u +%FT%TZ) minutes=$M resume=${RESUME:-none} models=$MODELS $(nproc) cores"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
python3 -c "import torch, transformers, tokenizers, PIL, torchaudio, matplotlib; print('torch', torch.__version__, \
'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"

ES=$W/espeak-ng
if ! command -v cc >/dev/null; then  # no compiler: use the stub prepare_carry.sh built
    export PCAUDIO_STUB=.train/libpcaudio.so.0
fi
bash tools/train/setup_espeak.sh .train/debs "$ES" || { echo "gpu_train: espeak-ng setup failed"; exit 1; }
L=$ES/usr/lib/x86_64-linux-gnu
LD_LIBRARY_PATH=$L ESPEAK_DATA_PATH=$L "$ES/usr/bin/espeak-ng" -w "$W/check.wav" "one two three" &&
    echo "espeak-ng works: $(stat -c %s "$W/check.wav") bytes of speech"

export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2 RAYON_NUM_THREADS=2
# Every batch has other sequence lengths: without expandable segments the caching allocator keeps missing and
# calls cudaMalloc/cudaFree (which synchronise the device) inside training steps.
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
if [ "${TOY:-0}" = 1 ]; then
    common="--toy --device cpu --workers 1"
    ocr_x="--batch 8 --eval-n 3 --replay 8" speech_x="--batch 8 --eval-n 3 --replay 8" text_x="--batch 4"
else  # 16 cores, shared with other work: 12 CPU data workers, 8 render images (~80/s each) + 4 synthesize speech
    common="" ocr_x="--workers 8 --batch 256 --replay 200" speech_x="--workers 4 --batch 128 --replay 200"
    text_x="--workers 2 --batch 16"
fi
# OCR_ARGS / SPEECH_ARGS / TEXT_ARGS (environment): more options for one model, e.g. a lower peak --lr for a short
# resumed round
ocr_x="$ocr_x ${OCR_ARGS:-}" speech_x="$speech_x ${SPEECH_ARGS:-}" text_x="$text_x ${TEXT_ARGS:-}"
if [ -n "$RESUME" ] && ls "$RESUME"/models.tar.xz.part* >/dev/null 2>&1; then  # a packed result of this script
    mkdir -p "$W/resume" && cat "$RESUME"/models.tar.xz.part* | tar -xJ -C "$W/resume" && RESUME=$W/resume
    echo "gpu_train: unpacked $(ls "$RESUME") to resume from"
fi
resume() { [ -n "$RESUME" ] && [ -f "$RESUME/$1/config.json" ] && echo "--resume $RESUME"; }
limit=$(python3 -c "print(int($M * 60 + 90))")
run() { # name script args...
    local n=$1; shift
    timeout -k 10 "$limit" python3 "$@" > "$W/$n.log" 2>&1
    echo "gpu_train: $n exited with $?" | tee -a "$W/$n.log"
}
names=() pids=()
for n in ${MODELS//,/ }; do
    case $n in
    ocr) run ocr tools/train/train_ocr.py --out "$W/run" --minutes "$M" $common $ocr_x $(resume ocr) & ;;
    speech) run speech tools/train/train_speech.py --out "$W/run" --espeak "$ES" --minutes "$M" $common $speech_x \
        $(resume speech) & ;;
    text) run text tools/train/train_text.py --out "$W/run" --minutes "$M" $common $text_x $(resume text) & ;;
    *) echo "gpu_train: unknown model $n"; continue ;;
    esac
    names+=("$n") pids+=($!)
done
alive() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
while alive; do
    sleep 20
    for n in "${names[@]}"; do
        echo "  $n: $(grep -a 'step\|eval\|saved\|Error\|exited' "$W/$n.log" | tail -n 1)"
    done
done
wait "${pids[@]}"  # (a plain wait would also wait for the tee process substitution)

python3 tools/train/summarize.py "$W/run" "$OUT/summary.json" "${names[@]}"
python3 - "$W/run" "$OUT" <<'PY'
import os, sys
sys.path.insert(0, "tools/train")
import util
run, out = sys.argv[1], sys.argv[2]
items = [(n, os.path.join(run, n)) for n in ("ocr", "speech", "text") if os.path.isdir(os.path.join(run, n))]
size, parts = util.pack_dirs(items, out)
print("gpu_train: packed %s (%.1f MB) into %s" % ([n for n, _ in items], size / 1e6,
                                                  [os.path.basename(p) for p in parts]))
PY
ls -la "$OUT"
echo "gpu_train: done $(date -u +%FT%TZ)"
for n in "${names[@]}"; do echo "=== $n.log"; cat "$W/$n.log"; done
sleep 1  # let tee write the last lines
