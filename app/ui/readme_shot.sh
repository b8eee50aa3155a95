#!/usr/bin/env bash
# readme_shot.sh [OMNI DEMO OPTIONS...] - the README's picture of `omni demo` (assets/demo.png), headless: the
# default model (the embedded OCR model in assets/models, else the random-weight Omni test fixture) reads a sample
# image (assets/samples/receipt.png, else a test fixture image) on both panes. Run from anywhere after a build.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${OMNI:-build/omni}
image=assets/samples/receipt.png
[ -f "$image" ] || image=tests/fixtures/vision/a_exact.png
script=$(mktemp)
trap 'rm -f "$script"' EXIT
cat > "$script" <<END
wait model
drop $image
wait media
preset read
wait done 600
END
"$bin" demo --script "$script" --screenshot assets/demo.png --size 1280x800 "$@" >/dev/null
echo "readme_shot: assets/demo.png ($image)" >&2
