"""Equal frames (``geometry="auto"``): windows of one frame size run on a fused engine with the geometry in the graph,
and give the stage-by-stage answers (the exact in-graph resize is bit-exact with ``cv2.resize``; see
tests/pipeline/test_fuse.py). The accelerator's decision is forced through a fake ``engine.info.device``."""

from __future__ import annotations

import numpy as np
import pytest

import amdinfer
from amdinfer import recipes
from amdinfer.errors import InputError, OptionError, StageError
from amdinfer.pipeline.fuse import FusedPipeline
from amdinfer.recipes._frames import MAX_SIZES, FramePipeline, frame_size, geometry_plan, route
from amdinfer.testing.models import tiny_cnn, yolov8

pytest.importorskip("cv2", reason="the host geometry must be OpenCV's for answers bit-equal to the graph's")

CPU = {"providers": ["CPUExecutionProvider"], "threads": 1}


def _frames(n: int, size: tuple[int, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 255, (*size, 3), np.uint8) for _ in range(n)]


def _on_gpu(builder, model, **kwargs) -> FramePipeline:
    """The recipe as it is built on an accelerator: its engine reports cuda:0 (it runs on the CPU EP)."""
    staged = builder(model, fuse=False, **kwargs, **CPU)
    staged.engine.info.device = "cuda:0"
    out = recipes._build._finish(staged, "auto", dict(CPU))
    assert isinstance(out, FramePipeline)
    return out


def _top(results) -> list[list[int]]:
    return [r.indices.tolist() for r in results]


class TestDecision:
    @pytest.mark.parametrize(
        ("geometry", "fuse", "device", "want"),
        [
            ("auto", "auto", "cuda:0", (True, True)),
            ("auto", "auto", "rocm:1", (True, True)),
            ("auto", "auto", "cpu", (False, False)),  # the stages: faster on the CPU
            ("auto", True, "cpu", (True, False)),  # fused, host geometry
            ("host", "auto", "cuda:0", (True, False)),
            ("graph", "auto", "cpu", (True, True)),
            ("auto", False, "cuda:0", (False, False)),
        ],
    )
    def test_plan(self, geometry, fuse, device, want) -> None:
        assert geometry_plan(geometry, fuse, device)[:2] == want

    @pytest.mark.parametrize(("geometry", "fuse"), [("graph", False), ("GRAPH", "auto"), (None, "auto")])
    def test_bad_geometry(self, geometry, fuse) -> None:
        with pytest.raises(OptionError, match="geometry: got"):
            geometry_plan(geometry, fuse, "cuda:0")
        with pytest.raises(OptionError, match="geometry: got"):
            amdinfer.classify(tiny_cnn(), geometry=geometry, fuse=fuse, **CPU)

    def test_frame_size_and_route(self) -> None:
        a = np.zeros((4, 6, 3), np.uint8)
        assert frame_size([a, a.copy()]) == (4, 6)
        assert frame_size([a, np.zeros((6, 4, 3), np.uint8)]) is None
        assert frame_size([a, b"jpeg bytes"]) is None and frame_size([np.zeros((4, 6), np.uint8)]) is None
        full = [(i, i) for i in range(MAX_SIZES)]
        assert route((4, 6), 2, [], minimum=2) == "graph" and route((4, 6), 1, [], minimum=2) == "host"
        assert route((4, 6), 99, full, minimum=2) == "host" and route((0, 0), 0, full, minimum=2) == "graph"

    def test_registry_option(self) -> None:
        for name in ("classify", "yolo"):
            option = {o.name: o for o in recipes.get_recipe(name).options}["geometry"]
            assert option.choices == ("auto", "host", "graph") and not option.flag


class TestFrames:
    def test_equal_frames_run_in_the_graph_with_the_host_answers(self, caplog) -> None:
        frames = _frames(20, (48, 64))
        with amdinfer.classify(tiny_cnn(), fuse=False, **CPU) as staged:
            want = _top(staged.run_batch(frames))
        clf = _on_gpu(amdinfer.classify, tiny_cnn())
        try:
            with caplog.at_level("INFO", logger="amdinfer.recipes"):
                got = _top(clf.map(iter(frames), batch_size=4))
                again = _top(clf.map(frames, batch_size=8))
            assert got == want and again == want
            assert _top(clf.run_batch(frames[:3])) == want[:3]
            assert clf.fused_sizes == ((48, 64),)
            assert clf.geometry["sizes"] == {"48x64": "graph"} and "cuda" in clf.geometry["why"]
            assert clf.engine.info.settings["geometry"] == clf.geometry
            assert "48x64: graph" in repr(clf)
            assert sum("frames of 48x64" in r.message for r in caplog.records) == 1  # once per size
        finally:
            clf.close()

    def test_mixed_sizes_keep_order(self) -> None:
        a, b, c = _frames(11, (48, 64), 1), _frames(9, (40, 52), 2), _frames(3, (33, 47), 3)
        stream = [*a[:5], c[0], *a[5:], *b, *c[1:], *a[:2]]
        with amdinfer.classify(tiny_cnn(), fuse=False, **CPU) as staged:
            want = _top(staged.run_batch(stream))
        clf = _on_gpu(amdinfer.classify, tiny_cnn())
        try:
            assert _top(clf.map(stream, batch_size=2)) == want
            assert _top(clf.map(stream, batch_size=3, workers=0)) == want
            assert _top(clf.run_batch(stream)) == want  # one call of mixed sizes: the host geometry
            assert (48, 64) in clf.fused_sizes and clf.geometry["sizes"]["mixed"] == "host"
        finally:
            clf.close()

    def test_one_photo_of_a_size_stays_on_the_host(self) -> None:
        clf = _on_gpu(amdinfer.classify, tiny_cnn())
        try:
            (photo,) = _frames(1, (70, 90))
            clf(photo)
            assert clf.fused_sizes == ()  # a size met once is not worth a compile
            clf(photo)
            assert clf.fused_sizes == ((70, 90),)
        finally:
            clf.close()

    def test_sizes_past_the_bound_use_the_host(self) -> None:
        clf = amdinfer.classify(tiny_cnn(), geometry="graph", **CPU)
        try:
            sizes = [(40 + i, 50 + i) for i in range(MAX_SIZES + 1)]
            for size in sizes:
                frames = _frames(2, size)
                with amdinfer.classify(tiny_cnn(), fuse=False, **CPU) as staged:
                    assert _top(clf.run_batch(frames)) == _top(staged.run_batch(frames))
            assert clf.fused_sizes == tuple(sizes[:MAX_SIZES])
            last = f"{sizes[-1][0]}x{sizes[-1][1]}"
            assert clf.geometry["sizes"][last] == "host"
        finally:
            clf.close()

    def test_close_closes_the_fused_engines(self) -> None:
        clf = _on_gpu(amdinfer.classify, tiny_cnn())
        clf.run_batch(_frames(2, (48, 64)))
        clf.run_batch(_frames(2, (40, 40)))
        engines = [clf.engine] + [f.engine for f in clf._fused.values()]
        assert len(engines) == 3
        clf.close()
        assert all(e.closed for e in engines)

    def test_threads_reach_every_size(self) -> None:
        clf = _on_gpu(amdinfer.classify, tiny_cnn())
        try:
            clf.run_batch(_frames(2, (48, 64)))
            clf.threads = 1
            clf.run_batch(_frames(2, (40, 40)))
            assert clf.threads == 1 and all(f.threads == 1 for f in clf._fused.values())
        finally:
            clf.close()

    def test_errors_name_the_item_of_the_stream(self) -> None:
        frames = _frames(20, (48, 64))
        stream = [*frames[:13], np.zeros((48, 64, 4), np.uint8), *frames[13:]]
        clf = _on_gpu(amdinfer.classify, tiny_cnn())
        try:
            got = []
            with pytest.raises(StageError, match=r"^item 13: ") as info:
                for r in clf.map(stream, batch_size=4):
                    got.append(r)
            assert isinstance(info.value, InputError) and info.value.index == 13
            assert len(got) <= 13
            # the run of the second window (the host geometry: mixed sizes) counts from the stream's start too
            mixed = [*frames[:8], *_frames(1, (40, 40)), *frames[8:11], np.zeros((48, 64), np.float32)]
            with pytest.raises(StageError, match=r"^item 12: "):
                list(clf.map(mixed, batch_size=4, workers=0))
        finally:
            clf.close()

    def test_yolo_equal_frames(self) -> None:
        model = yolov8(image_size=64, num_classes=2)
        frames = _frames(6, (48, 80), 5)
        with amdinfer.yolo(model, fuse=True, geometry="host", conf=0.01, **CPU) as host:
            assert type(host) is FusedPipeline
            want = host.run_batch(frames)
        det = _on_gpu(amdinfer.yolo, model, conf=0.01)
        try:
            got = list(det.map(frames, batch_size=3))
            assert det.fused_sizes == ((48, 80),)
            for a, b in zip(got, want):
                assert len(b) > 0 and a.classes.tolist() == b.classes.tolist()
                np.testing.assert_allclose(a.boxes, b.boxes, atol=1e-3)
        finally:
            det.close()
