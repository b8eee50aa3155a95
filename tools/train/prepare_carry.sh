#!/usr/bin/env bash
# prepare_carry.sh - fill the ignored folder .train/ that gpu_train.sh needs on the GPU host (run here, Debian 12,
# from the repository root; about 5 MB): the espeak-ng Debian packages (unpacked there with dpkg -x) and a
# prebuilt libpcaudio stub (used only if the host has no C compiler). Carry [".train"] with the device run.
set -euo pipefail
cd "$(dirname "$0")/../.."
ex="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '/.train/' "$ex" 2>/dev/null || echo '/.train/' >> "$ex"
mkdir -p .train/debs
(cd .train/debs && rm -f ./*.deb && apt-get download espeak-ng espeak-ng-data libespeak-ng1 libpcaudio0 libsonic0)
cc -shared -fPIC -O2 -Wall -Wl,-soname,libpcaudio.so.0 -o .train/libpcaudio.so.0 tools/train/pcaudio_stub.c
bash tools/train/setup_espeak.sh .train/debs /tmp/espeak-check
L=/tmp/espeak-check/usr/lib/x86_64-linux-gnu
LD_LIBRARY_PATH=$L ESPEAK_DATA_PATH=$L /tmp/espeak-check/usr/bin/espeak-ng -w /tmp/espeak-check.wav "one two three"
rm -rf /tmp/espeak-check /tmp/espeak-check.wav
du -sh .train
git status --short --ignored .train | head -3
