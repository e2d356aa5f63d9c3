#!/usr/bin/env bash
# One H200 (nvidia-h200: 16 cores, no network): `python benchmarks/serving.py gpu1` with the serve wheels.
#
# Carried (ignored paths, see docs/performance.md "Serving"): .carry/serve-wheels (part*.tar.xz: kserve 0.21
# and what it needs that the machine lacks, tritonclient), the trained YOLOv8n .onnx, and onnxruntime-gpu
# unpacked in $HOME/site beforehand. Usage, from the repository root:
#
#   bash benchmarks/serving_h200.sh [--yolo .carry/yolov8n-doclaynet.onnx] [serving.py gpu1 options...]
#   bash benchmarks/serving_h200.sh defaults --client-procs 4 [--yolo M.onnx] [--model M.onnx] [--classifier M.onnx]
#
# The second form (issue 38): each served row with `amdinfer serve`'s defaults and with the docs' flags side by
# side, over the engine alone (ResNet-50 with random weights built by amdinfer.testing.models unless --model /
# --classifier give files); it writes $OUT/serving_defaults.md and $OUT/serving_defaults.json too (about 3-4 min
# for the two ResNet-50 rows, add about 1 min for --yolo).
#
# Writes $OUT/serving.jsonl and $OUT/serving_h200.log; prints one Markdown table at the end.
set -euo pipefail
OUT=${OUT:-/tmp/serving-out}
mkdir -p "$OUT" "$HOME/servesite"
if [ ! -e "$HOME/servesite/kserve" ]; then
    wheels=$(mktemp -d)
    for part in .carry/serve-wheels/part*.tar.xz; do tar -xJf "$part" -C "$wheels"; done
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$HOME/servesite" "$wheels"/*.whl
    rm -rf "$wheels"
fi
export PYTHONPATH="$HOME/site:$HOME/servesite:$PWD"
export PYTHONUNBUFFERED=1
export AMDINFER_CACHE_DIR=${AMDINFER_CACHE_DIR:-$(mktemp -d)}
# torch first: onnxruntime-gpu finds its CUDA libraries through it
python3 -c "import torch, onnxruntime, kserve, fastapi, uvicorn, grpc, aiohttp, tritonclient.utils.shared_memory, amdinfer
print('torch', torch.__version__, torch.cuda.get_device_name(0), '| onnxruntime', onnxruntime.__version__,
      onnxruntime.get_available_providers(), '| kserve', kserve.__version__ if hasattr(kserve, '__version__') else '?')"
python3 -m amdinfer serve --help | grep -E -- "--workers-per-device|--recipe|--verify-sample|--shared-memory" || true
command=gpu1
case "${1:-}" in gpu1|defaults) command=$1; shift ;; esac
python3 benchmarks/serving.py "$command" --out "$OUT" "$@" 2>&1 | tee "$OUT/serving_h200.log"
