"""``amdinfer.engines.ort._pinned_upload``: which host batches PyTorch copies to the GPU ahead of a bound run.

The copy itself needs a CUDA device (measured on the H200: docs/performance.md); here a stand-in ``torch`` module
records what the function asks of it, so the rule (CUDA engine, PyTorch imported with CUDA, every feed a pinned
NumPy array, at least ``MIN_BYTES``) and the protocol (a side stream per thread, ``non_blocking`` copies, the
stream waited for before returning) are checked on any machine.
"""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

import numpy as np
import pytest

from amdinfer.engines.ort import _pinned_upload as pu


class _Tensor:
    def __init__(self, array: np.ndarray, pinned: bool, log: list[Any], device: str = "cpu") -> None:
        self.array, self.pinned, self.log, self.device = array, pinned, log, device

    def is_pinned(self) -> bool:
        return self.pinned

    def to(self, device: str, non_blocking: bool = False) -> _Tensor:
        self.log.append(("to", device, non_blocking, threading.current_thread().name))
        return _Tensor(self.array, False, self.log, device)


def _fake_torch(pinned: set[int], log: list[Any], cuda: bool = True) -> types.ModuleType:
    torch = types.ModuleType("torch")

    class Stream:
        def __init__(self, device: int) -> None:
            log.append(("stream", device))

        def synchronize(self) -> None:
            log.append(("synchronize",))

    class _StreamContext:
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        def __enter__(self) -> None:
            log.append(("enter",))

        def __exit__(self, *exc: Any) -> None:
            log.append(("exit",))

    torch.cuda = types.SimpleNamespace(is_available=lambda: cuda, Stream=Stream, stream=_StreamContext)  # type: ignore[attr-defined]
    torch.from_numpy = lambda a: _Tensor(a, id(a) in pinned, log)  # type: ignore[attr-defined]
    return torch


@pytest.fixture()
def log(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(pu, "_local", threading.local())
    return []


BIG = np.zeros((pu.MIN_BYTES // 4,), np.float32)  # exactly MIN_BYTES


def test_a_pinned_batch_is_copied_non_blocking_on_a_side_stream_and_waited_for(monkeypatch, log) -> None:
    monkeypatch.setitem(sys.modules, "torch", _fake_torch({id(BIG)}, log))
    out = pu.pinned_upload({"x": BIG}, "cuda", 1)
    assert out is not None and out["x"].device == "cuda:1" and out["x"].array is BIG
    kinds = [e[0] for e in log]
    assert kinds == ["stream", "enter", "to", "exit", "synchronize"], log
    assert log[2][1:3] == ("cuda:1", True)


def test_the_side_stream_is_made_once_per_thread(monkeypatch, log) -> None:
    monkeypatch.setitem(sys.modules, "torch", _fake_torch({id(BIG)}, log))
    for _ in range(3):
        pu.pinned_upload({"x": BIG}, "cuda", 0)
    worker = threading.Thread(target=pu.pinned_upload, args=({"x": BIG}, "cuda", 0))
    worker.start()
    worker.join()
    assert [e for e in log if e[0] == "stream"] == [("stream", 0), ("stream", 0)]


@pytest.mark.parametrize(
    "why",
    ["pageable", "small", "not cuda", "no torch", "torch without cuda", "a device feed", "one of two pageable"],
)
def test_declined_where_the_rule_does_not_hold(monkeypatch, log, why: str) -> None:
    small = np.zeros(16, np.float32)
    other = np.zeros_like(BIG)
    feeds: dict[str, Any] = {"x": BIG}
    pinned, device, cuda = {id(BIG), id(small)}, "cuda", True
    if why == "pageable":
        pinned = set()
    elif why == "small":
        feeds = {"x": small}
    elif why == "not cuda":
        device = "cpu"
    elif why == "torch without cuda":
        cuda = False
    elif why == "a device feed":
        feeds = {"x": object()}
    elif why == "one of two pageable":
        feeds = {"x": BIG, "y": other}
    if why == "no torch":
        monkeypatch.delitem(sys.modules, "torch", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "torch", _fake_torch(pinned, log, cuda))
    assert not pu.pinnable(feeds, device)
    assert pu.pinned_upload(feeds, device, 0) is None
    assert not [e for e in log if e[0] == "to"]


def test_a_failing_copy_declines_instead_of_raising(monkeypatch, log) -> None:
    torch = _fake_torch({id(BIG)}, log)

    def broken(self: Any, device: str, non_blocking: bool = False) -> Any:
        raise RuntimeError("CUDA error: invalid device ordinal")

    monkeypatch.setattr(_Tensor, "to", broken)
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert pu.pinned_upload({"x": BIG}, "cuda", 7) is None
