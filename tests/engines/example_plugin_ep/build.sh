#!/usr/bin/env bash
# Rebuild ONNX Runtime's example plugin EPs from the fetched git dir.
# Usage: bash build.sh [GIT_DIR] [COMMIT] [PYTHON]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
GIT_DIR="${1:-/work/.mirror/intel+onnxruntime/repo}"
# upstream microsoft/onnxruntime main commit (as mirrored in intel/onnxruntime), VERSION_NUMBER 1.30.0, ORT_API_VERSION 30
COMMIT="${2:-89b01b406ca7e94078913eea3189e11bef5654c5}"
PY="${3:-python3}"

command -v cmake >/dev/null && command -v g++ >/dev/null || apt-get install -y cmake g++
[ -f /usr/include/gsl/gsl ] || apt-get install -y libmsgsl-dev   # Microsoft GSL (gsl/span, gsl/gsl)

rm -rf "$HERE/src" && mkdir -p "$HERE/src"
# git archive may report unreadable blobs elsewhere in the tree (snapshot lacks big files); the paths we ask for extract fine
git --git-dir="$GIT_DIR" archive "$COMMIT" include/onnxruntime/core/session onnxruntime/test/autoep/library \
  | tar -x -C "$HERE/src" || true
test -f "$HERE/src/onnxruntime/test/autoep/library/example_plugin_ep/ep_factory.cc"
grep -n "define ORT_API_VERSION" "$HERE/src/include/onnxruntime/core/session/onnxruntime_c_api.h"

# Variant "example_plugin_ep_compat": the same example EP with ONE change, so that it runs on an ORT whose build does not
# offer the experimental EpContextConfig functions (onnxruntime 1.32.0 offers only OrtApi_ExperimentalApiTest_SinceV28):
# CreateEp uses an empty EpContextConfig (nullptr: EPContext data goes through the file fallback) instead of failing.
L="$HERE/src/onnxruntime/test/autoep/library"
rm -rf "$L/example_plugin_ep_compat" && cp -r "$L/example_plugin_ep" "$L/example_plugin_ep_compat"
OLD='Ort::Experimental::EpContextConfig{Ort::ConstSessionOptions{session_options}}'
NEW='(Ort::Experimental::Get_OrtEpApi_ReleaseEpContextConfig_SinceV28_Fn(\&Ort::GetApi()) ? Ort::Experimental::EpContextConfig{Ort::ConstSessionOptions{session_options}} : Ort::Experimental::EpContextConfig{nullptr})'
grep -qF "$OLD" "$L/example_plugin_ep_compat/ep_factory.cc"
sed -i "s|$OLD|$NEW|" "$L/example_plugin_ep_compat/ep_factory.cc"
grep -n "EpContextConfig{nullptr}" "$L/example_plugin_ep_compat/ep_factory.cc"

ORT_LIB="$("$PY" -c 'import onnxruntime, glob, os; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))[0])')"
echo "linking against $ORT_LIB"
cmake -S "$HERE" -B "$HERE/build" -DORT_SRC="$HERE/src" -DORT_LIB="$ORT_LIB" -DCMAKE_BUILD_TYPE=Release
time cmake --build "$HERE/build" -j"$(nproc)"
ls -l "$HERE"/build/*.so
