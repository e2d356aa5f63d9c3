"""``serve --recipe yolo`` on segmentation and pose models answers masks (RLE texts) and keypoints with the boxes,
equal to what ``amdinfer.yolo`` answers in the process (run in a fresh process, as the other recipe serving tests)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)

_CODE = """if True:
    import io, json, sys
    import numpy as np
    from PIL import Image
    import amdinfer
    from amdinfer.results import Detections
    from amdinfer.serve import load_recipe_workers
    from amdinfer.testing.models import yolov8_pose, yolov8_seg

    model = yolov8_seg(image_size=64, num_classes=2) if sys.argv[1] == "segment" else yolov8_pose(image_size=64)
    options = {"imgsz": 64, "conf": 0.01, "decoder": "pillow"}
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)).save(buf, "PNG")
    images = np.empty(1, dtype=object)
    images[:] = [buf.getvalue()]
    (worker,) = load_recipe_workers(model, "yolo", recipe_options=options, providers=["cpu"])
    served = worker.run([{"images": images}])[0]
    worker.pipeline.close()
    (got,) = Detections.from_batch(served, 1)
    pipe = amdinfer.yolo(model, **options, providers=["cpu"], keep_image=False)
    want = pipe(buf.getvalue())
    pipe.close()
    same = np.allclose(got.boxes, want.boxes)
    if want.masks is not None:
        same = same and np.array_equal(got.masks.data, want.masks.data)
    if want.keypoints is not None:
        same = same and np.allclose(got.keypoints.data, want.keypoints.data)
    print(json.dumps({"tensors": sorted(served), "rows": len(want), "equal": bool(same)}))
"""


@pytest.mark.parametrize("task", ["segment", "pose"])
def test_served_masks_and_keypoints_equal_the_recipe(task: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _CODE, task], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["equal"] is True and answer["rows"] >= 1, answer
    assert ("masks" if task == "segment" else "keypoints") in answer["tensors"]
    assert "boxes_batch_index" in answer["tensors"]
