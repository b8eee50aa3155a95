#!/usr/bin/env bash
# readme_shot.sh [audio|read] [OMNI DEMO OPTIONS...] - the README's pictures of `omni demo`, headless.
#   audio (default): assets/demo.png - the preset "Ask about the audio" on assets/samples/call.wav, answered by the
#                    first model that hears audio (the embedded speech model assets/models/speech);
#   read:            assets/demo-ocr.png - the preset "Read the text" on assets/samples/receipt.png, read by the
#                    embedded OCR model assets/models/ocr, else by the random-weight Omni test fixture (answers
#                    that are noise; the speech model's vision tower is an untrained placeholder).
# Both panes (A bf16, B int2 unless the options say otherwise) answer; the answers are printed on stdout, the
# comparison and frame-time lines on stderr. Run from anywhere after a build.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${OMNI:-build/omni}
mode=audio
case "${1:-}" in audio | read) mode=$1 && shift ;; esac
model=()
if [ "$mode" = audio ]; then
    media=assets/samples/call.wav preset=audio shot=assets/demo.png
else
    media=assets/samples/receipt.png preset=read shot=assets/demo-ocr.png
    model=(-m assets/models/ocr)
    [ -f assets/models/ocr/config.json ] || model=(-m tests/fixtures/audio/omni-a)
fi
script=$(mktemp)
trap 'rm -f "$script"' EXIT
cat > "$script" <<END
wait model
drop $media
wait media
preset $preset
wait done 600
END
"$bin" demo "${model[@]}" --script "$script" --screenshot "$shot" --size 1280x800 "$@"
echo "readme_shot: $shot ($media, preset $preset)" >&2
