#!/usr/bin/env bash
# setup_espeak.sh DEBDIR DEST - unpack Debian's espeak-ng packages (dpkg -x, no install) into DEST and replace
# libpcaudio (ALSA/PulseAudio playback, unused for synthesis to memory) by the stub built from pcaudio_stub.c.
# With PCAUDIO_STUB=FILE the stub is copied instead of compiled. Afterwards speech_data.Espeak(DEST) works; the
# CLI runs as
#   L=DEST/usr/lib/x86_64-linux-gnu; LD_LIBRARY_PATH=$L ESPEAK_DATA_PATH=$L DEST/usr/bin/espeak-ng -w out.wav "text"
# DEBDIR must hold espeak-ng, espeak-ng-data, libespeak-ng1, libsonic0 (and libpcaudio0) .debs of Debian 12;
# fetch them with: (cd DEBDIR && apt-get download espeak-ng espeak-ng-data libespeak-ng1 libpcaudio0 libsonic0)
set -euo pipefail
deb=$1 dest=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dest"
mkdir -p "$dest"
for f in "$deb"/*.deb; do dpkg -x "$f" "$dest"; done
lib=$dest/usr/lib/x86_64-linux-gnu
rm -f "$lib"/libpcaudio.so*
if [ -n "${PCAUDIO_STUB:-}" ]; then  # prebuilt by prepare_carry.sh (hosts without a C compiler)
    cp "$PCAUDIO_STUB" "$lib/libpcaudio.so.0"
else
    cc -shared -fPIC -O2 -Wall -Wl,-soname,libpcaudio.so.0 -o "$lib/libpcaudio.so.0" "$here/pcaudio_stub.c"
fi
test -f "$lib/libespeak-ng.so.1" && test -d "$lib/espeak-ng-data"
