"""Every recipe ``amdinfer serve --recipe`` offers is served by ``serve``/``load_recipe_workers`` and by the
model repository, from its one record in the recipe registry (issue 37).

The truth is the recipe's public function (``amdinfer.yolo``, ``amdinfer.classify``, ``amdinfer.ocr``) run in
the same process on the same file bytes. Each check runs in a fresh process: KServe's protos cannot load beside
tritonclient's, which other modules of this session import.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ocr"))
from _models import DATA, PAGES, models

from amdinfer.recipes import RECIPES

OCR = models()
SERVED = [name for name, r in RECIPES.items() if not r.not_served]
needs_ocr = pytest.mark.skipif(OCR is None, reason="needs rapidocr==3.10.0 installed --no-deps (nox -s serve)")

#: builds one served recipe's workers and its public function on the same model, and prints both answers
_WORKERS = """if True:
    import io, json, sys
    import numpy as np
    import onnx
    from PIL import Image
    import amdinfer
    from amdinfer.recipes import get_recipe
    from amdinfer.serve import load_recipe_workers
    from amdinfer.testing.models import tiny_cnn, unet, yolov8

    name, page = sys.argv[1], sys.argv[2]
    if name == "ocr":
        model, options = sys.argv[3], {"rec": sys.argv[4], "cls": sys.argv[5]}
        data = open(page, "rb").read()
    else:
        model = {"yolo": yolov8(image_size=64), "segment": unet()}.get(name) or tiny_cnn(num_classes=4)
        options = {"yolo": {"imgsz": 64, "conf": 0.001}, "classify": {"topk": 3}}.get(name, {})
        options["decoder"] = "pillow"
        buf = io.BytesIO()
        Image.fromarray(np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)).save(buf, "PNG")
        data = buf.getvalue()
    (worker,) = load_recipe_workers(model, name, recipe_options=options, providers=["cpu"])
    images = np.empty(1, dtype=object)
    images[:] = [data]
    served = worker.run([{"images": images}])[0]
    worker.pipeline.close()
    pipe = get_recipe(name).builder_function()(model, **options, providers=["cpu"], keep_image=False)
    local = pipe(data)
    pipe.close()
    key = {"yolo": "boxes", "classify": "indices", "ocr": "texts", "segment": "classes"}[name]
    want = getattr(local, {"yolo": "boxes", "classify": "indices", "ocr": "texts", "segment": "classes"}[name])
    got = served[key].reshape(-1) if key == "texts" else served[key].reshape(np.asarray(want).shape)
    print(json.dumps({
        "class": type(worker.pipeline).__name__, "images": worker.takes_images, "rows": len(want),
        "equal": [x.decode() for x in got] == list(want) if key == "texts" else bool(np.allclose(got, want)),
    }))
"""


def _run(code: str, *args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


@pytest.mark.parametrize("name", SERVED)
def test_every_served_recipe_is_served_as_its_function_answers(name: str) -> None:
    if name == "ocr" and OCR is None:
        pytest.skip("needs rapidocr==3.10.0 installed --no-deps (nox -s serve)")
    paths = [str(OCR[k]) for k in ("det", "rec", "cls")] if name == "ocr" and OCR else []
    (line,) = _run(_WORKERS, name, str(DATA / PAGES[0]), *paths)
    answer = json.loads(line)
    assert answer["images"] is True and answer["equal"] is True, answer
    assert answer["rows"] >= 1  # something to compare: boxes, classes or text lines
    assert (
        answer["class"]
        == {"yolo": "Pipeline", "classify": "Pipeline", "ocr": "OcrPipeline", "segment": "Segmenter"}[name]
    )


def test_serve_refuses_recipes_and_options_before_anything_loads(tmp_path: Path) -> None:
    code = """if True:
        import sys
        from amdinfer.errors import OptionError
        from amdinfer.serve import load_recipe_workers, serve
        calls = [
            lambda: load_recipe_workers(sys.argv[1], "yolov9"),
            lambda: load_recipe_workers(sys.argv[1], "embed"),
            lambda: serve(sys.argv[1], recipe="classify", recipe_options={"conf": 0.5}, http_port=0),
            lambda: serve(sys.argv[1], recipe_options={"conf": 0.5}, http_port=0),
            lambda: serve(sys.argv[1], recipe="ocr", http_port=0),
            lambda: serve(sys.argv[1], recipe="yolo", recipe_options={"fuse": True}, workers_per_device=2),
        ]
        for call in calls:
            try:
                call()
            except OptionError as exc:
                print(exc)
    """
    lines = _run(textwrap.dedent(code), str(tmp_path / "never-read.onnx"))
    assert lines == [
        "recipe: got 'yolov9', expected one of ['yolo', 'classify', 'ocr', 'segment']",
        "recipe: got 'embed', expected one of ['yolo', 'classify', 'ocr', 'segment'] (embed is not served: it reads "
        "texts through a tokenizer, and the server serves image recipes)",
        "recipe_options: got option 'conf' for recipe 'classify', expected options among ['decoder', "
        "'dynamic_batch', 'fuse', 'geometry', 'max_image_pixels', 'pipeline_threads', 'topk']",
        "recipe_options: got ['conf'] without a recipe, expected recipe= one of ['yolo', 'classify', 'ocr', 'segment']",
        "recipe_options: 'ocr' needs rec (the recogniser model; cls, the classifier, is optional)",
        "recipe_options: fuse: not carried to the server processes of workers_per_device=2 (only the flags of "
        "recipe 'yolo' are: conf, iou, imgsz, max_det, decoder, tiles, tile_overlap, pipeline_threads, "
        "max_image_pixels); use workers_per_device=1",
    ]


@needs_ocr
def test_a_repository_serves_ocr_with_its_models_from_the_config(tmp_path: Path) -> None:
    """An ``ocr`` model folder: the detector as ``ocr/model.onnx``, the recogniser and classifier named in
    ``models.toml``; the loaded model answers a page as ``amdinfer.ocr`` does."""
    assert OCR is not None
    root = tmp_path / "repo"
    (root / "ocr").mkdir(parents=True)
    for key, file in (("det", "model.onnx"), ("rec", "rec.onnx"), ("cls", "cls.onnx")):
        shutil.copy(OCR[key], root / "ocr" / file)
    (root / "models.toml").write_text(
        '[models.ocr]\nrecipe = "ocr"\nrecipe_options = { rec = "ocr/rec.onnx", cls = "ocr/cls.onnx" }\n'
    )
    code = """if True:
        import asyncio, json, sys
        import numpy as np
        from kserve.model_repository import ModelRepository as Registry
        import amdinfer
        from amdinfer.serve import ModelRepository

        root, page = sys.argv[1], sys.argv[2]
        data = open(page, "rb").read()
        repo = ModelRepository(root, defaults={"providers": ["cpu"]}, warmup=False)
        async def main():
            await repo.start(Registry())
            (model,) = repo.loaded
            (worker,) = model.batcher.workers
            images = np.empty(1, dtype=object)
            images[:] = [data]
            served = await asyncio.get_running_loop().run_in_executor(None, worker.run, [{"images": images}])
            index = await repo.index()
            await repo.close()
            return type(worker.pipeline).__name__, served[0], index
        name, served, index = asyncio.run(main())
        pipe = amdinfer.ocr(f"{root}/ocr/model.onnx", f"{root}/ocr/rec.onnx", f"{root}/ocr/cls.onnx",
                            providers=["cpu"], keep_image=False)
        local = pipe(data)
        pipe.close()
        texts = [t.decode() for t in served["texts"].reshape(-1)]
        print(json.dumps({"class": name, "index": index, "texts": texts, "want": list(local.texts),
                          "quads": float(np.abs(served["quads"] - np.asarray(local.quads)).max(initial=0))}))
    """
    (line,) = _run(textwrap.dedent(code), str(root), str(DATA / PAGES[0]))
    answer = json.loads(line)
    assert answer["index"] == [{"name": "ocr", "state": "READY", "reason": ""}]
    assert answer["class"] == "OcrPipeline"
    assert len(answer["want"]) >= 3 and answer["texts"] == answer["want"]
    assert answer["quads"] <= 1e-3
