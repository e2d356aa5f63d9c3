"""Several engines or threads on GPUs at once: the graph-capture gate and the DLPack export device.

On a GPU these two are proven by ``benchmarks/serving.py gpu`` (two H200s, docs/performance.md); here
the serialisation logic runs on the CPU with ONNX Runtime's CPU provider and a fake device producer.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Iterator

import numpy as np
import pytest

from amdinfer.engines import _dlpack as dl
from amdinfer.engines.ort import _capture as cap
from amdinfer.engines.ort import _iobinding as iob
from amdinfer.errors import InputError
from amdinfer.testing.models import tiny_cnn
from amdinfer.types import TensorSpec

ort = pytest.importorskip("onnxruntime")


class WatchedGate(cap.CaptureGate):
    """A real gate that records every section and checks the invariant on each entry."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.shared = 0
        self.captures = 0
        self.violations: list[str] = []
        self.log: list[str] = []

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        with super().run():
            with self.lock:
                nested = self.captures > 0 and getattr(self._local, "depth", 0) > 1
                if self.captures and not nested:
                    self.violations.append("shared section entered during a capture")
                self.shared += 1
                self.log.append("run")
            try:
                yield
            finally:
                with self.lock:
                    self.shared -= 1

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        with super().capture():
            with self.lock:
                if self.captures or self.shared:
                    self.violations.append(f"capture entered with {self.captures} captures, {self.shared} shared")
                self.captures += 1
                self.log.append("capture")
            try:
                yield
            finally:
                with self.lock:
                    self.captures -= 1


def _wait_until(predicate, what: str) -> None:
    done = threading.Event()
    for _ in range(5000):
        if predicate():
            return
        done.wait(0.002)
    raise AssertionError(f"timed out waiting for {what}")


class TestCaptureGate:
    def test_shared_sections_overlap(self):
        gate = cap.CaptureGate()
        barrier = threading.Barrier(3, timeout=30)
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                with gate.run():
                    barrier.wait()  # all three inside at once, or BrokenBarrierError
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert gate.active == 0

    def test_capture_waits_for_shared_and_holds_new_ones_off(self):
        gate = cap.CaptureGate()
        order: list[str] = []
        release_a = threading.Event()
        a_inside = threading.Event()

        def a() -> None:
            with gate.run():
                a_inside.set()
                release_a.wait(30)
                order.append("a-exit")

        def c() -> None:
            with gate.capture():
                order.append("capture")

        def b() -> None:
            with gate.run():
                order.append("b")

        ta = threading.Thread(target=a)
        ta.start()
        a_inside.wait(30)
        tc = threading.Thread(target=c)
        tc.start()
        _wait_until(lambda: gate._waiting == 1, "the capture to queue")
        tb = threading.Thread(target=b)
        tb.start()
        release_a.set()
        for t in (ta, tb, tc):
            t.join(30)
        # the capture waited for the running shared section, and the later shared one waited for the capture
        assert order == ["a-exit", "capture", "b"]

    def test_sections_nest_in_one_thread(self):
        gate = cap.CaptureGate()
        with gate.capture():
            with gate.run():  # would deadlock without per-thread re-entry
                assert gate.capturing
        with gate.run(), gate.capture():
            assert gate.active == 1
        assert gate.active == 0 and not gate.capturing

    def test_many_threads_never_break_the_invariant(self):
        gate = WatchedGate()
        rounds = 200

        def worker(k: int) -> None:
            for i in range(rounds):
                section = gate.capture() if (i + k) % 7 == 0 else gate.run()
                with section:
                    pass

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert gate.violations == []
        assert gate.log.count("capture") == sum(1 for k in range(6) for i in range(rounds) if (i + k) % 7 == 0)


def _runner(graphs: bool, gate: cap.CaptureGate) -> tuple[iob.IoBindingRunner, object]:
    sess = ort.InferenceSession(tiny_cnn().SerializeToString(), providers=["CPUExecutionProvider"])
    spec = TensorSpec("input", np.dtype("float32"), ("N", 3, 32, 32))
    runner = iob.IoBindingRunner(ort, sess, "CPUExecutionProvider", 0, [spec], ["logits"], graphs=graphs)
    runner.gate = gate
    return runner, sess


class TestRunnerUsesTheGate:
    def test_first_graph_runs_capture_alone_then_replays_share(self):
        gate = WatchedGate()
        runner, sess = _runner(True, gate)
        x = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
        want = sess.run(None, {"input": x})[0]
        for _ in range(6):
            np.testing.assert_allclose(runner.run({"input": x}, None, "host")["logits"], want, rtol=1e-6)
        # run 1 has no graph id yet (output shapes unknown); runs 2-4 may capture; later runs replay
        assert gate.log[:1] == ["run"]
        assert gate.log.count("capture") == cap.CAPTURE_RUNS
        assert gate.log[-2:] == ["run", "run"]
        assert gate.violations == []

    def test_cpu_runner_without_graphs_takes_no_section(self):
        gate = WatchedGate()
        runner, _ = _runner(False, gate)
        runner.run({"input": np.zeros((1, 3, 32, 32), np.float32)}, None, "host")
        assert gate.log == []

    def test_two_engines_in_two_threads_share_one_gate(self):
        gate = WatchedGate()
        runners = [_runner(True, gate) for _ in range(2)]
        rng = np.random.default_rng(1)
        xs = [rng.random((n, 3, 32, 32), dtype=np.float32) for n in (1, 2, 3)]
        errors: list[BaseException] = []

        def work(runner: iob.IoBindingRunner, sess: object) -> None:
            try:
                for _ in range(8):
                    for x in xs:
                        got = runner.run({"input": x}, None, "host")["logits"]
                        np.testing.assert_allclose(got, sess.run(None, {"input": x})[0], rtol=1e-6)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=r) for r in runners]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert gate.violations == []
        assert gate.log.count("capture") == 2 * len(xs) * cap.CAPTURE_RUNS


class _FakeCuda:
    """The part of ``torch.cuda`` used here: a current device per thread, and a device context."""

    def __init__(self) -> None:
        self.local = threading.local()

    def current_device(self) -> int:
        return getattr(self.local, "device", 0)

    @contextlib.contextmanager
    def device(self, index: int) -> Iterator[None]:
        before = self.current_device()
        self.local.device = index
        try:
            yield
        finally:
            self.local.device = before


class FakeDeviceTensor:
    """A producer on CUDA device ``index`` that, like PyTorch, exports only from its current device."""

    __module__ = "torch"

    def __init__(self, array: np.ndarray, index: int, cuda: _FakeCuda) -> None:
        self.array, self.index, self.cuda = array, index, cuda

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.index)

    def __dlpack__(self, stream: object = None) -> object:
        current = self.cuda.current_device()
        if current != self.index:
            raise BufferError(
                f"Can't export tensors on a different CUDA device index. Expected: {self.index}. "
                f"Current device: {current}."
            )
        return self.array.__dlpack__()


class TestDlpackExportDevice:
    @pytest.fixture
    def fake_torch(self, monkeypatch: pytest.MonkeyPatch) -> _FakeCuda:
        cuda = _FakeCuda()
        monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
        return cuda

    @pytest.mark.parametrize("index", [0, 1, 3])
    def test_tensor_on_any_device_exports_under_its_device(self, fake_torch: _FakeCuda, index: int):
        x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        feed = dl.device_feed("images", FakeDeviceTensor(x, index, fake_torch))
        assert isinstance(feed, dl.DeviceFeed)
        assert (feed.device_type, feed.device_id, feed.shape, feed.dtype) == (2, index, (2, 3, 4), x.dtype)
        assert feed.ptr == x.ctypes.data
        assert fake_torch.current_device() == 0  # the caller's current device is restored

    def test_without_the_device_context_the_producer_refuses(self, fake_torch: _FakeCuda, monkeypatch):
        # the failure the context fixes (issue 14): the export itself fails off the tensor's device
        monkeypatch.setattr(dl, "_DEVICE_CONTEXTS", {})
        with pytest.raises(InputError, match=r"input 'images'.*different CUDA device index"):
            dl.device_feed("images", FakeDeviceTensor(np.zeros(3, np.float32), 1, fake_torch))
