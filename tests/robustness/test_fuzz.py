"""Property-based fuzzing of the ``Engine.run`` contract on every engine available here.

Whatever the feeds, ``run`` either returns the model's outputs, equal to onnx's own ``ReferenceEvaluator``
on the same (float32, C-ordered) input, or raises an :class:`~amdinfer.errors.AmdinferError`; nothing else
(no bare ``ValueError`` from NumPy, no runtime's own exception, no silent cast). Counts go to the summary
line printed by ``conftest.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _outcome import FUZZ
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from amdinfer.errors import AmdinferError
from amdinfer.testing import conformance
from amdinfer.testing.models import tiny_cnn

MODELS = {
    "tiny_cnn": tiny_cnn(image_size=8),
    # Two inputs sharing the symbolic batch dim: names, symbols and broadcasting all get exercised.
    "add2": helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["a", "b"], ["c"])],
            "add2",
            [
                helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 4]),
            ],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 4])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=9,
    ),
}
VALID_TAIL = {"tiny_cnn": {"input": (3, 8, 8)}, "add2": {"a": (4,), "b": (4,)}}
DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_]


def _kinds() -> list[str]:
    return [k for k in conformance.selected_kinds() if conformance.availability(k) is None]


def _array(tail: tuple[int, ...]) -> st.SearchStrategy[object]:
    """Mostly near-valid arrays (right tail, random batch, dtype, order, special values), some anything."""
    valid_shape = st.integers(0, 3).map(lambda n: (n, *tail))
    any_shape = hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=4)
    arrays = st.builds(
        lambda shape, dtype, fill, fortran: _make(shape, dtype, fill, fortran),
        st.one_of(valid_shape, valid_shape, any_shape),
        st.sampled_from([np.float32, np.float32, *DTYPES]),
        st.sampled_from([0.0, 0.5, -1.0, np.nan, np.inf, 1e30, "random"]),
        st.booleans(),
    )
    return st.one_of(
        arrays,
        arrays.map(lambda a: a.tolist() if a.size < 200 else a),  # lists: converted only when exact
        arrays.map(lambda a: np.ma.masked_array(a)),
        arrays.map(lambda a: np.broadcast_to(a[:1], a.shape) if a.ndim and a.shape[0] else a),
        st.sampled_from([None, "x", 3, 2.5, b"bytes", object()]),
    )


def _make(shape: tuple[int, ...], dtype: type, fill: object, fortran: bool) -> np.ndarray:
    if fill == "random":
        arr = np.random.default_rng(0).standard_normal(shape)
    else:
        arr = np.full(shape, fill)
    with np.errstate(all="ignore"):
        arr = arr.astype(dtype)
    return np.asfortranarray(arr) if fortran else arr


@st.composite
def _valid(draw: st.DrawFn, model: str) -> dict[str, object]:
    """Feeds that satisfy the contract, in the many forms it accepts (orders, views, exact lists, NaN/Inf)."""
    n = draw(st.integers(1, 3))
    out: dict[str, object] = {}
    for name, tail in VALID_TAIL[model].items():
        arr = _make(
            (n, *tail), np.float32, draw(st.sampled_from([0.5, np.nan, -np.inf, "random"])), draw(st.booleans())
        )
        form = draw(st.sampled_from(["array", "array", "list", "broadcast", "strided"]))
        if form == "list":
            arr = arr.tolist() if arr.size < 200 else arr  # float32 values are exact as float64: converted
        elif form == "broadcast":
            arr = np.broadcast_to(arr[:1], arr.shape)
        elif form == "strided":
            arr = np.repeat(arr, 2, axis=-1)[..., ::2]
        out[name] = arr
    return out


def _feeds(model: str) -> st.SearchStrategy[object]:
    tails = VALID_TAIL[model]
    names = [*tails, "extra"]
    as_dict = st.dictionaries(st.sampled_from(names), st.deferred(lambda: _array((4,))), max_size=3)
    exact = st.fixed_dictionaries({n: _array(t) for n, t in tails.items()})
    options = [_valid(model), _valid(model), exact, as_dict]
    if len(tails) == 1:
        options.append(_array(next(iter(tails.values()))))  # a bare array for a one-input model
    return st.one_of(options)


_ENGINES: dict[tuple[str, str], object] = {}


def _engine(kind: str, model: str):
    if (kind, model) not in _ENGINES:
        _ENGINES[(kind, model)] = conformance.make_engine(kind, MODELS[model])
    return _ENGINES[(kind, model)]


@pytest.fixture(scope="module", autouse=True)
def _close_engines():
    yield
    for engine in _ENGINES.values():
        engine.close()
    _ENGINES.clear()


def _oracle(model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    proto = MODELS[model]
    ev = ReferenceEvaluator(proto)
    return dict(zip([o.name for o in proto.graph.output], ev.run(None, feeds)))


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", _kinds())
def test_run_contract(kind: str, model: str) -> None:
    engine = _engine(kind, model)
    names = [s.name for s in engine.inputs]

    @settings(max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(feeds=_feeds(model))
    def check(feeds: object) -> None:
        try:
            with np.errstate(all="ignore"):  # NaN/Inf feeds are legal; their warnings are noise here
                out = engine.run(feeds)
        except AmdinferError:
            FUZZ["typed"] += 1
            return
        except Exception:
            FUZZ["other"] += 1
            raise
        FUZZ["ran"] += 1
        given_ = feeds if isinstance(feeds, dict) else {names[0]: feeds}
        # It ran, so every feed was (or losslessly became) float32 of a valid shape; no silent cast.
        plain = {}
        for n in names:
            value = given_[n]
            assert not isinstance(value, np.ma.MaskedArray)
            arr = np.asarray(value)
            assert arr.dtype == np.float32 or (isinstance(value, list) and arr.dtype.kind in "iuf"), arr.dtype
            plain[n] = np.ascontiguousarray(arr.astype(np.float32))
        with np.errstate(all="ignore"):
            want = _oracle(model, plain)
        assert list(out) == list(want)
        for k, v in want.items():
            np.testing.assert_allclose(out[k], v, rtol=2e-3 if "fp16" in kind else 1e-4, atol=1e-4, equal_nan=True)

    check()


def test_models_are_valid() -> None:
    for proto in MODELS.values():
        onnx.checker.check_model(proto)
