"""Ray Data with ``BatchPredictor(pipeline=...)`` on results that know their tensors: one column per tensor
(``result_boxes``, ...), rebuilt into results by ``from_tensors`` equal to the pipeline's own ``run_batch``.

Truth: the same pipeline's ``run_batch`` in this process. Everything stays on this machine (a local Ray).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: run `nox -s serve`")

import amdinfer  # noqa: E402
from amdinfer.postprocess import Nms, Softmax, TopK, YoloDecode  # noqa: E402
from amdinfer.preprocess import Cast, HwcToChw, Letterbox, Normalize  # noqa: E402
from amdinfer.ray import BatchPredictor  # noqa: E402
from amdinfer.results import Classification, Detections  # noqa: E402
from amdinfer.testing.models import tiny_cnn, yolov8  # noqa: E402

from .pipelines import detect  # noqa: E402

RAY_ENV = {"RAY_memory_monitor_refresh_ms": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
NAMES = [f"class {i}" for i in range(10)]


def labelled_classify() -> amdinfer.Pipeline:
    """uint8 HWC images -> the tiny CNN's top-3 Classification, with class names."""
    return amdinfer.Pipeline(
        preprocess=[HwcToChw(), Cast("float32")],
        engine=tiny_cnn(seed=4),
        backend="ort",
        providers=["CPUExecutionProvider"],
        postprocess=[Softmax(), TopK(3, labels=NAMES)],
    )


def finds_nothing() -> amdinfer.Pipeline:
    """The test detector with a threshold no score reaches: Detections of 0 boxes."""
    return amdinfer.Pipeline(
        preprocess=[Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
        engine=yolov8(seed=1, image_size=64, num_classes=4),
        backend="ort",
        providers=["CPUExecutionProvider"],
        postprocess=[YoloDecode(conf_threshold=0.999), Nms()],
    )


@pytest.fixture(scope="module")
def local_ray():
    from . import pipelines

    os.environ.update(RAY_ENV)
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _node_ip_address="127.0.0.1",
    )
    ray.cloudpickle.register_pickle_by_value(pipelines)  # the workers cannot import the tests folder
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


def _rows(pipeline, images: list[np.ndarray], batch_size: int) -> list[dict]:
    ds = ray.data.from_items([{"id": i, "item": im} for i, im in enumerate(images)])
    rows = ds.map_batches(
        BatchPredictor,
        fn_constructor_kwargs={"pipeline": pipeline},
        batch_size=batch_size,
        batch_format="numpy",
        concurrency=1,
        num_cpus=0.5,
    ).take_all()
    return sorted(rows, key=lambda r: r["id"])


def test_detections_one_column_per_tensor(local_ray) -> None:
    rng = np.random.default_rng(2)
    images = [rng.integers(0, 255, (40 + 3 * i, 56, 3), dtype=np.uint8) for i in range(7)]
    rows = _rows(detect, images, batch_size=2)
    with detect() as pipe:
        want = pipe.run_batch(images)
    # batches [19, 23], [22, 22] (one box count: stacked), [21, 27], [25]: both column forms meet in one dataset
    assert [len(d) for d in want] == [19, 23, 22, 22, 21, 27, 25]
    assert sorted(k for k in rows[0] if k.startswith("result")) == ["result_boxes", "result_classes", "result_scores"]
    for row, ref in zip(rows, want):
        got = Detections.from_tensors({k: row["result_" + k] for k in ("boxes", "scores", "classes")})
        np.testing.assert_allclose(got.boxes, ref.boxes, atol=1e-4)
        np.testing.assert_allclose(got.scores, ref.scores, atol=1e-6)
        np.testing.assert_array_equal(got.classes, ref.classes)


def test_classifications_with_labels(local_ray) -> None:
    images = list(np.random.default_rng(3).integers(0, 255, (6, 32, 32, 3), dtype=np.uint8))
    rows = _rows(labelled_classify, images, batch_size=4)
    with labelled_classify() as pipe:
        want = pipe.run_batch(images)
    for row, ref in zip(rows, want):
        got = Classification.from_tensors({k: row["result_" + k] for k in ("indices", "scores", "labels")})
        assert got.indices.tolist() == ref.indices.tolist() and got.labels == ref.labels
        np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-5)


def test_detections_without_boxes(local_ray) -> None:
    images = list(np.random.default_rng(4).integers(0, 255, (5, 40, 56, 3), dtype=np.uint8))
    rows = _rows(finds_nothing, images, batch_size=2)
    assert len(rows) == 5
    for row in rows:
        got = Detections.from_tensors({k: row["result_" + k] for k in ("boxes", "scores", "classes")})
        assert len(got) == 0 and got.boxes.shape == (0, 4)
