#!/usr/bin/env bash
# The one-lease H200 run of this repository's open GPU questions (issues 23, 24, 25, 28), in one script.
#
# Uploaded beforehand (see docs/performance.md "How the H200 runs are made"): the chunks of one tar under
# ~/g/chunk*, holding .gpu/part* (onnxruntime-gpu, benchmarks' ort-gpu-chunks), .carry/serve-wheels,
# .carry/ocr-wheels, .carry/yolov8n-doclaynet.onnx, minilm/paraphrase-MiniLM-L3-v2.onnx, minilm/tokenizers-*.whl
# cudapy/*.whl (cuda-python for tritonclient.utils.cuda_shared_memory); and, carried in the last call,
# .up/mixed_nodes.json (AutoMixedPrecision's kept nodes from the CPU run of precision_study.py: no search on the GPU).
# minilm/ is needed by the study part only.
#   PARTS="study ocr cudashm serving nvjpeg onegpu multigpu" bash benchmarks/h200_session.sh   (repo root; writes $OUT)
set -euo pipefail
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT" "$HOME/w"
if [ ! -d "$HOME/site/onnxruntime" ]; then
    cat "$HOME"/g/chunk* | tar x -C "$HOME/w"
    mkdir -p "$HOME/site"
    cat "$HOME"/w/.gpu/part* | xz -d | tar x -C "$HOME/site"
    if ls "$HOME"/w/minilm/tokenizers-*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --target "$HOME/tsite" "$HOME"/w/minilm/tokenizers-*.whl
    fi
    python3 -m pip install -q --no-index --no-deps --target "$HOME/cudasite" "$HOME"/w/cudapy/*.whl
fi
rm -rf .carry && cp -r "$HOME/w/.carry" .carry
if [ ! -e "$HOME/servesite/kserve" ]; then  # as benchmarks/serving_h200.sh does
    wheels=$(mktemp -d)
    for p in .carry/serve-wheels/part*.tar.xz; do tar -xJf "$p" -C "$wheels"; done
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$HOME/servesite" "$wheels"/*.whl
    rm -rf "$wheels"
fi
export PYTHONPATH="$HOME/site:$HOME/tsite:$PWD"
export AMDINFER_CACHE_DIR=${AMDINFER_CACHE_DIR:-$HOME/amdinfer-cache}
export ORT_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
SETS="0"; [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && SETS="0 0,1"  # issue 25's device sets: both where two GPUs are
set +e  # one part failing must not stop the others
for part in ${PARTS:-ocr cudashm nvjpeg onegpu}; do
    start=$(date +%s)
    case $part in
    study)
        python3 benchmarks/precision_study.py --device cuda --minilm "$HOME/w/minilm/paraphrase-MiniLM-L3-v2.onnx" \
            --mixed-nodes "$( [ -f .up/mixed_nodes.json ] && echo .up/mixed_nodes.json || echo skip )" --out "$OUT/study" 2>&1 | tee "$OUT/study.log" ;;
    ocr)  # OCR_SKIP_CPU=0 adds the 2-pinned-core CPU comparison; the CUDA EP run with shape buckets (the default)
        OUT="$OUT/ocr" OCR_SKIP_CPU=${OCR_SKIP_CPU:-1} OCR_STAGES=1 OCR_PLAIN_CTC=1 OCR_REPEAT=${OCR_REPEAT:-2} \
            bash benchmarks/ocr_h200.sh 2>&1 \
            | tee "$OUT/ocr.log" ;;
    cudashm)  # tritonclient's cuda_shared_memory needs cuda-python (cuda.bindings), in its own site folder
        PYTHONPATH="$HOME/site:$HOME/servesite:$HOME/cudasite:$PWD" python3 benchmarks/serving_cuda_shm.py \
            --out "$OUT/cudashm" 2>&1 | tee "$OUT/cudashm.log" ;;
    serving)
        OUT="$OUT/serving" bash benchmarks/serving_h200.sh --configs jpeg-diagnosis workers-recipe \
            --gpu-clients 64 --client-procs 4 --seconds 4 --engine-seconds 1 2>&1 | tail -40 ;;
    nvjpeg)  # issue 23: JPEG requests decoded on the GPU
        OUT="$OUT/nvjpeg" bash benchmarks/serving_h200.sh --configs jpeg-nvjpeg \
            --gpu-clients 64 --client-procs 4 --seconds 4 --engine-seconds 1 2>&1 | tail -20 ;;
    multigpu)  # issue 25, item 2 on this machine's GPUs: a pipeline per GPU, mixed-size host images, device tensors
        python3 benchmarks/pipeline_gpu.py --devices $SETS --out "$OUT/multigpu" 2>&1 | tail -8 ;;
    onegpu)  # issue 25: the served rows with --devices 0 (and 0,1 where the machine has two GPUs)
        yolo=(); [ -f .carry/yolov8n-doclaynet.onnx ] && yolo=(--yolo .carry/yolov8n-doclaynet.onnx)
        PYTHONPATH="$HOME/site:$HOME/servesite:$PWD" python3 benchmarks/serving.py gpu --device-sets $SETS "${yolo[@]}" \
            --gpu-clients 16 64 --client-procs 4 --seconds 4 --out "$OUT/onegpu" 2>&1 | tail -20 ;;
    esac
    echo "== $part: $(( $(date +%s) - start )) s" | tee -a "$OUT/times.txt"
done
