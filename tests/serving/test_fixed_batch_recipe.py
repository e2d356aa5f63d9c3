"""``amdinfer serve M --recipe yolo`` over a model exported with a fixed batch (Ultralytics' batch-1 default): the
server's batches run in chunks of the fixed batch, whatever its max batch and buckets.

The bug (H200, CUDA EP): the fused recipe's graph input has axis 0 ``N`` although its Reshapes hold the 1, so the
defaults read a dynamic batch axis after load, chose the accelerator's buckets 8,16,32,64, reloaded the engines with
them, and every request failed in ONNX Runtime's Reshape (a chunk of 1 padded to 8 rows). The accelerator is faked
here as in test_defaults.py (the rule is told the CPU engine is a CUDA one). Truth: the same images one request of
one image at a time on the recipe loaded without any server defaults (batch 1, what the export takes).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from amdinfer.testing.models import yolov8

SIZE = 64


def _batch1_export(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` at batch 1 with every constant Reshape shape written out in full, as Ultralytics exports it."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in list(out.graph.input) + list(out.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = 1
    inferred = onnx.shape_inference.infer_shapes(out, strict_mode=True)
    shapes = {
        vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
    }
    inits = {t.name: t for t in out.graph.initializer}
    for node in out.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(np.asarray(shapes[node.output[0]]), node.input[1]))
    return out


@pytest.fixture(scope="module")
def fixed_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fixed") / "yolo-b1.onnx"
    onnx.save(_batch1_export(yolov8(seed=3, image_size=SIZE, num_classes=4)), str(path))
    return path


# KServe is not imported in the test process (its protos and tritonclient's register the same names): a child runs it.
def _python(code: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


_SERVE = """if True:
    import logging, sys
    import numpy as np
    from amdinfer.serve import _models, _serve_api
    CUDA = ("cuda:0", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    _serve_api.expected_device = lambda *a: CUDA
    real = _models.served_defaults
    _models.served_defaults = lambda device, providers, *a, **k: real(*CUDA, *a, **k)
    given = dict.fromkeys(("max_batch_size", "max_delay_ms", "pipeline_threads"))
    load = {{"devices": [0], "backend": "auto", "precision": "fp32", "providers": ["cpu"]}}
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="log %(message)s")
    path, options = {path!r}, {{"imgsz": {size}, "fuse": True, "conf": 0.01{extra}}}
    images = [np.random.default_rng(i).integers(0, 256, (48 + 4 * (i // 4 % 5), 80, 3), np.uint8) for i in range(64)]
"""


def _rows(tensors: dict, item: int) -> list[tuple[int, float]]:
    keep = np.asarray(tensors["boxes_batch_index"]) == item
    return sorted((int(c), round(float(s), 4)) for c, s in zip(tensors["classes"][keep], tensors["scores"][keep]))


def test_served_fixed_batch_recipe_on_an_accelerator_gets_no_buckets_and_answers(fixed_path: Path) -> None:
    """The automatic defaults on an accelerator, the export kept at batch 1 (``dynamic_batch=False``): 64 rows a
    batch, no buckets, one load; a batch of 64 images from 16 requests answers what each image alone does (before:
    buckets 8,16,32,64 and the Reshape error)."""
    lines = _python(
        _SERVE.format(path=str(fixed_path), size=SIZE, extra=', "dynamic_batch": False')
        + """
    load["batch_buckets"] = None
    target, _, chosen = _serve_api._served_target(path, "yolo", options, 0.0, "ort", given, **load)
    w = target[0]
    print("chosen", type(w.pipeline).__name__, w.pipeline.fixed_batch, w.pipeline.engine.batch_buckets,
          chosen.max_batch_size, chosen.batch_buckets, chosen.why["batch_buckets"])
    requests = [{"images": np.stack(images[k : k + 4])} for k in range(0, 64, 4)]
    import pickle
    sys.stdout.write("answers " + pickle.dumps(w.run(requests)[:3]).hex() + "\\n")
    print("warm", w.warmup(chosen.max_batch_size, runs=1))
    from amdinfer.serve._models import load_recipe_workers
    one = load_recipe_workers(path, "yolo", recipe_options=options, providers=["cpu"])[0]
    alone = [one.run([{"images": images[k][None]}])[0] for k in range(12)]
    sys.stdout.write("alone " + pickle.dumps(alone).hex() + "\\n")
    """
    )
    import pickle

    assert not any(line.startswith("log expected buckets") for line in lines), lines  # loaded once
    assert "chosen FusedPipeline 1 () 64 () auto: CUDA EP, fixed batch 1" in lines, lines
    assert "warm [1]" in lines
    answers = pickle.loads(bytes.fromhex(next(x for x in lines if x.startswith("answers ")).split()[1]))
    alone = pickle.loads(bytes.fromhex(next(x for x in lines if x.startswith("alone ")).split()[1]))
    got = [_rows(answers[k // 4], k % 4) for k in range(12)]
    want = [_rows(a, 0) for a in alone]
    assert got == want and all(want)


def test_served_fixed_batch_recipe_with_given_buckets_is_refused_at_load(fixed_path: Path) -> None:
    """``--batch-buckets 8,16,32,64`` on a batch-1 recipe model: an OptionError at load naming the fixed batch
    (before: the server started and every request failed in ONNX Runtime's Reshape)."""
    lines = _python(
        _SERVE.format(path=str(fixed_path), size=SIZE, extra=', "dynamic_batch": False')
        + """
    from amdinfer.errors import OptionError
    load["batch_buckets"] = (8, 16, 32, 64)
    try:
        _serve_api._served_target(path, "yolo", options, 0.0, "ort", given, **load)
    except OptionError as exc:
        print("refused", exc)
    """
    )
    assert any(
        line.startswith("refused batch_buckets: got [8, 16, 32, 64], expected none") and "fixed batch of 1" in line
        for line in lines
    ), lines


def test_served_batch1_recipe_made_dynamic_is_loaded_once_with_the_accelerator_buckets(fixed_path: Path) -> None:
    """``dynamic_batch=True`` (what ``"auto"`` does on a real accelerator): the batch-1 export is predicted
    batch-dynamic before the load, so the engines load once, with the accelerator's buckets (before: loaded with no
    buckets, then loaded again); 16 requests of 4 answer what each image alone does on the export as it is."""
    lines = _python(
        _SERVE.format(path=str(fixed_path), size=SIZE, extra=', "dynamic_batch": True')
        + """
    load["batch_buckets"] = None
    target, _, chosen = _serve_api._served_target(path, "yolo", options, 0.0, "ort", given, **load)
    w = target[0]
    print("chosen", w.pipeline.fixed_batch, w.pipeline.engine.batch_buckets, chosen.batch_buckets)
    requests = [{"images": np.stack(images[k : k + 4])} for k in range(0, 64, 4)]
    import pickle
    sys.stdout.write("answers " + pickle.dumps(w.run(requests)[:3]).hex() + "\\n")
    from amdinfer.serve._models import load_recipe_workers
    plain = dict(options, dynamic_batch=False)
    one = load_recipe_workers(path, "yolo", recipe_options=plain, providers=["cpu"])[0]
    alone = [one.run([{"images": images[k][None]}])[0] for k in range(12)]
    sys.stdout.write("alone " + pickle.dumps(alone).hex() + "\\n")
    """
    )
    import pickle

    assert not any(line.startswith("log expected") for line in lines), lines  # loaded once
    assert "chosen None (8, 16, 32, 64) (8, 16, 32, 64)" in lines, lines
    answers = pickle.loads(bytes.fromhex(next(x for x in lines if x.startswith("answers ")).split()[1]))
    alone = pickle.loads(bytes.fromhex(next(x for x in lines if x.startswith("alone ")).split()[1]))
    got = [_rows(answers[k // 4], k % 4) for k in range(12)]
    want = [_rows(a, 0) for a in alone]
    assert got == want and all(want)


def test_served_batch1_recipe_predicted_dynamic_but_kept_fixed_loads_again_without_buckets(fixed_path: Path) -> None:
    """The prediction wrong (``"auto"`` on an engine that runs on the CPU, told it is an accelerator): the load with
    the predicted buckets is refused by the fixed batch, and the server loads again without buckets, saying why,
    instead of failing to start."""
    lines = _python(
        _SERVE.format(path=str(fixed_path), size=SIZE, extra="")
        + """
    load["batch_buckets"] = None
    target, _, chosen = _serve_api._served_target(path, "yolo", options, 0.0, "ort", given, **load)
    w = target[0]
    print("chosen", w.pipeline.fixed_batch, w.pipeline.engine.batch_buckets, chosen.batch_buckets)
    """
    )
    assert "log expected yolo to get a dynamic batch, but it kept its fixed batch: loading it without buckets" in lines
    assert "chosen 1 () ()" in lines, lines
