#!/usr/bin/env bash
# OCR on a GPU machine: amdinfer.ocr against RapidOCR 3.10.0 with the same PP-OCR models, writing into $OUT
#   ocr_cpu.json   CPU EP, the process pinned to 2 cores (taskset), 2 intra-op threads each (issue 24: <= 0.8x)
#   ocr_cuda.json  CUDA EP on both (RapidOCR: EngineConfig.onnxruntime.use_cuda)
#   ocr.md         one Markdown table with both rows
# Needs: python3 with numpy/onnx/opencv/pillow, onnxruntime-gpu at $HOME/site, and the wheels RapidOCR needs at
# run time in .carry/ocr-wheels (no internet: installed --no-index --no-deps into ~/ocrsite). Within 5 minutes.
#   run: bash benchmarks/ocr_h200.sh            (carry: .carry/ocr-wheels)
#   env: OCR_REPEAT (3), OCR_CPUS (taskset list, "2,3"), OCR_PYTHON (python3), OCR_SKIP_CPU=1, OCR_SKIP_CUDA=1, OCR_INT8=1,
#        OCR_VARIANTS=1 (CUDA run: each tuned default off in turn, and seconds per stage), OCR_STAGES=1 (seconds per stage),
#        OCR_PLAIN_CTC=1 (also fuse_ctc=False)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ocr-out}
mkdir -p "$OUT"
PY=${OCR_PYTHON:-python3}
SITE=${OCR_SITE:-$HOME/ocrsite}
REPEAT=${OCR_REPEAT:-3}
CPUS=${OCR_CPUS:-2,3}
if [ ! -d "$SITE/rapidocr" ]; then
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" .carry/ocr-wheels/*.whl
fi
export PYTHONPATH="$HOME/site:$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export AMDINFER_CACHE_DIR=${AMDINFER_CACHE_DIR:-$(mktemp -d)}
rm -f "$OUT/ocr.md"
"$PY" - <<'PYEOF' | tee "$OUT/env.txt"
import onnxruntime, rapidocr, sys, os
print("python", sys.version.split()[0], "onnxruntime", onnxruntime.__version__, "device", onnxruntime.get_device())
print("providers", onnxruntime.get_available_providers(), "cpus", os.cpu_count())
PYEOF
int8=()
[ "${OCR_INT8:-0}" = 1 ] && int8=(--int8)
variants=()
[ "${OCR_VARIANTS:-0}" = 1 ] && variants=(--variants)
[ "${OCR_STAGES:-0}" = 1 ] && variants+=(--stages)
[ "${OCR_PLAIN_CTC:-0}" = 1 ] && variants+=(--plain-ctc)
if [ "${OCR_SKIP_CPU:-0}" != 1 ]; then
    echo "== CPU, pinned to cores $CPUS"
    taskset -c "$CPUS" "$PY" benchmarks/ocr.py --rapidocr-python "$PY" --threads 2 --repeat "$REPEAT" --providers cpu \
        "${int8[@]}" "${variants[@]}" --json "$OUT/ocr_cpu.json" --markdown "$OUT/ocr.md"
fi
if [ "${OCR_SKIP_CUDA:-0}" != 1 ]; then
    echo "== CUDA EP"
    "$PY" benchmarks/ocr.py --rapidocr-python "$PY" --threads 2 --repeat "$REPEAT" --providers cuda \
        "${variants[@]}" --json "$OUT/ocr_cuda.json" --markdown "$OUT/ocr.md"
fi
cat "$OUT/ocr.md"
