#!/usr/bin/env bash
# setup.sh - install what is missing (Debian 12, as root), build, then run the main job or the test suite.
#   bash scripts/setup.sh run    # build and read a sample image with the embedded OCR model
#   bash scripts/setup.sh test   # build and run the whole test suite (normal build, then ASan/UBSan build)
#   bash scripts/setup.sh fuzz   # clang + libFuzzer build of tests/fuzz, each target 60 s (ctest -L fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}

PKGS="build-essential cmake pkg-config libopenblas-dev libcjson-dev libpcre2-dev libutf8proc-dev libstb-dev
libsndfile1-dev libavformat-dev libavcodec-dev libswresample-dev libavutil-dev libfftw3-dev libsdl2-dev
libsdl2-ttf-dev fonts-dejavu-core libcmocka-dev libjpeg-dev libcairo2-dev libmicrohttpd-dev python3-venv fonts-droid-fallback"
# only for `fuzz` (the normal and CI builds stay gcc)
[ "$mode" = fuzz ] && PKGS="$PKGS clang libclang-rt-14-dev libomp-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing:$missing" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
fi

jobs=$(nproc)
build() { # build DIR [cmake args...]
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
}

# build/venv: a Python virtual environment with the official `openai` client, which the `omni serve` tests drive
# (they report SKIP when it is missing, e.g. without access to PyPI).
make_venv() {
  if [ -x build/venv/bin/python ] && build/venv/bin/python -c "import openai" 2>/dev/null; then return 0; fi
  rm -rf build/venv
  if python3 -m venv build/venv >&2 && build/venv/bin/pip install -q --disable-pip-version-check openai >&2; then
    echo "setup: build/venv has the openai client" >&2
  else
    echo "setup: warning: cannot create build/venv with the openai package: the omni serve client tests will SKIP" >&2
    rm -rf build/venv
  fi
}

case "$mode" in
  run)
    build build -DOMNI_CUDA=AUTO
    ./build/omni ocr assets/samples/receipt.png  # the README's main command: the embedded OCR model
    ;;
  test)
    # CUDA code is compiled when nvcc is present (OMNI_CUDA=AUTO); GPU tests report SKIP (77) without a GPU.
    build build -DOMNI_CUDA=AUTO
    make_venv
    # label `long` (the soak test) is left out: `cd build && ctest -L long` runs it
    (cd build && ctest --output-on-failure -j"$jobs" -LE long --timeout 900)
    # Second pass with AddressSanitizer + UndefinedBehaviorSanitizer (leaks, overflows, UB).
    build build-asan -DOMNI_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOMNI_CUDA=OFF
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" -LE 'slow|long' --timeout 900)
    ;;
  fuzz)
    bash tests/fuzz/run_all.sh build build-fuzz
    (cd build-fuzz && ctest --output-on-failure -L fuzz --timeout 600)
    ;;
  *)
    echo "usage: bash scripts/setup.sh run|test|fuzz" >&2
    exit 1
    ;;
esac
