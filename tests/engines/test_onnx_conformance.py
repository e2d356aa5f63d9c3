"""ONNX's backend node test cases against the reference engine and the ONNX Runtime engine (CPU).

``onnx.backend.test.loader.load_model_tests(kind="node")`` builds ~1,900 one-node (or expanded-function)
models with inputs and expected outputs in memory, offline. Every case runs through ``amdinfer.load``
and ``Engine.run`` exactly as a user would, and the outputs are compared the way onnx's own backend
runner compares them (same shape, same dtype, ``assert_allclose`` with the case's ``rtol``/``atol``,
strings exactly).

Each case ends as one of:

* passed;
* rejected by the engine contract: the case needs what amdinfer engines refuse on purpose (zero-size
  axes, map inputs or outputs); the test asserts the refusal (``InputError`` / ``ModelError``). Sequence and
  optional inputs and outputs are part of the contract: they run, fed as lists and ``None``;
* excluded: a known failure listed in :data:`EXCLUDE` with its reason; it still runs, is reported as
  xfailed, and fails the test once it passes (so a fix upstream gets its entry removed). A case the contract
  rejects may be excluded too, by its exact name, when the engine fails before the contract's check (a plugin
  EP that cannot compile the model); it fails the test once the contract's refusal comes through;
* skipped: its expected output cannot be reproduced by any engine (:data:`SKIP`, random ops).

The counts per engine are printed at the end of the run ("ONNX node conformance" section).

Kinds a runtime plugin registers (ONNX Runtime plugin EPs: ``ort-openvino``) keep their known failures beside
this file, in ``_node_excludes_<kind>.py`` made from a run by ``make_plugin_excludes.py``; such a kind runs the
node tests when its plugin is installed. ``AMDINFER_TEST_ENGINES`` selects kinds here as in the contract suite
(``nox -s plugin_eps`` runs ``ort-openvino`` alone).
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

import amdinfer
from amdinfer.errors import InputError, ModelError
from amdinfer.testing import conformance

_RANDOM = "random output: the expected values come from NumPy's generator, which no runtime reproduces"

#: Cases no engine can be judged on: skipped, never run.
SKIP: dict[str, str] = {
    r"test_bernoulli.*": _RANDOM,
    r"test_training_dropout.*": _RANDOM + " (training-mode Dropout draws its mask at random)",
}


def _plugin_tables() -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """Kind -> its known failures (``EXCLUDE``) and kind -> its cases not run since the file was made
    (``UNMEASURED``), from the ``_node_excludes_<kind>.py`` files beside this file."""
    tables, unmeasured = {}, {}
    for path in sorted(Path(__file__).parent.glob("_node_excludes_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tables[module.KIND] = module.EXCLUDE
        unmeasured[module.KIND] = getattr(module, "UNMEASURED", {})
    return tables, unmeasured


def plugin_node_excludes() -> dict[str, dict[str, str]]:
    """Kind -> its known failures, from the ``_node_excludes_<kind>.py`` files (``EXCLUDE``) beside this file."""
    return _plugin_tables()[0]


#: Kind -> cases that plugin kind has not been run on since its exclude file was made (exact names -> why): the
#: engine contract took them up later, and the plugin offers its device only on hardware not at hand. They run;
#: a pass counts as passed and a failure as an xfail naming this reason, until the file is remade on that
#: hardware (``make_plugin_excludes.py`` measures them like every other case).
UNMEASURED: dict[str, dict[str, str]] = _plugin_tables()[1]


#: Known failures per engine kind, ``{case name or regex (full match): reason}``; still run, reported as xfail.
#: Each backend registers them with its conformance kinds (``amdinfer.testing._node_excludes``); plugin kinds
#: keep theirs beside this file (:func:`plugin_node_excludes`).
EXCLUDE: dict[str, dict[str, str]] = {**conformance.node_test_excludes(), **plugin_node_excludes()}

#: The engine kinds the node tests run on: every registered conformance kind with ``node_tests=True`` and every
#: registered plugin kind with an exclude file, narrowed to ``AMDINFER_TEST_ENGINES`` when it is set.
BACKENDS = tuple(k for k in EXCLUDE if k in conformance.ENGINE_KINDS and k in conformance.selected_kinds())


# ---------------------------------------------------------------------------------------------- cases
@lru_cache(maxsize=1)
def _cases() -> dict[str, Any]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow casts on purpose
        return {c.name: c for c in load_model_tests(kind="node")}


def _case_names(config: pytest.Config) -> list[str]:
    """Case names, cached in pytest's cache per onnx version so collection does not build every case."""
    cache = getattr(config, "cache", None)
    key = f"amdinfer/onnx_node_cases/{onnx.__version__}"
    names = cache.get(key, None) if cache is not None else None
    if not names:
        names = sorted(_cases())
        if cache is not None:
            cache.set(key, names)
    return names


def _match(table: dict[str, str], name: str) -> str | None:
    for pattern, reason in table.items():
        if re.fullmatch(pattern, name):
            return reason
    return None


def _array(value: Any) -> Any:
    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else value


def accepts_zero_size(backend: str | None) -> bool:
    """Whether kind ``backend``'s engine takes zero-size inputs (``Engine.accepts_zero_size``: the reference engine)."""
    if backend is None:
        return False
    from amdinfer.engines.registry import get_backend

    engine = get_backend(conformance.ENGINE_KINDS[backend].options["backend"]).resolve()
    return bool(getattr(engine, "accepts_zero_size", False))


def contract_rejection(case: Any, backend: str | None = None) -> str | None:
    """Why the engine contract refuses this case on kind ``backend``, or None: map (or other non-tensor) I/O, or a
    zero-size input on an engine that refuses them (every engine but the reference one).

    Sequences and optionals (``sequence(tensor)``, ``optional(tensor)``, ``optional(sequence(tensor))``) run.
    """
    graph = case.model.graph
    for vi in (*graph.input, *graph.output):
        if _container_type(vi.type) is None:
            return f"graph input/output {vi.name!r} of type {vi.type.WhichOneof('value')}: engines take no maps"
    for inputs, _ in case.data_sets:
        for value in inputs:
            for arr in value if isinstance(value, list) else [_array(value)]:
                if isinstance(arr, np.ndarray) and arr.ndim and 0 in arr.shape and not accepts_zero_size(backend):
                    return f"zero-size input of shape {arr.shape}: the engine contract rejects zero-size axes"
    return None


def _container_type(tp: onnx.TypeProto) -> tuple[str, ...] | None:
    """The wrappers around a graph value's tensors (``()``: a tensor), or None for a type engines do not take."""
    wrappers: list[str] = []
    while tp.WhichOneof("value") in ("sequence_type", "optional_type"):
        kind = tp.WhichOneof("value")
        wrappers.append(kind)
        tp = getattr(tp, kind).elem_type
    if tp.WhichOneof("value") != "tensor_type" or tuple(wrappers) not in _CONTAINERS:
        return None
    return tuple(wrappers)


_CONTAINERS = {(), ("sequence_type",), ("optional_type",), ("optional_type", "sequence_type")}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_name" in metafunc.fixturenames:
        names = _case_names(metafunc.config)
        params = [pytest.param(b, n, id=f"{b}-{n}") for b in BACKENDS for n in names]
        metafunc.parametrize(("backend", "case_name"), params)


# ---------------------------------------------------------------------------------------------- summary
_TALLY: dict[str, Counter[str]] = {b: Counter() for b in BACKENDS}


class _Summary:
    """Prints the per-engine counts in the terminal summary (visible with -q, in CI logs)."""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not any(_TALLY.values()):
            return
        terminalreporter.section("ONNX node conformance (onnx.backend.test node cases)")
        terminalreporter.write_line(f"onnx {onnx.__version__}: {len(_cases())} node cases")
        for backend, tally in _TALLY.items():
            if tally:
                total = sum(tally.values())
                terminalreporter.write_line(
                    f"{backend:>9}: {tally['passed']} passed, {tally['failed']} failed, "
                    f"{tally['excluded']} excluded (known failures), {tally['contract']} rejected by the engine "
                    f"contract, {tally['skipped']} skipped (random)"
                    + (f", {tally['unmeasured']} not measured on this kind yet" if tally["unmeasured"] else "")
                    + f" of {total} run"
                )


@pytest.fixture(scope="module")
def tally(request: pytest.FixtureRequest) -> dict[str, Counter[str]]:
    manager = request.config.pluginmanager
    if not manager.has_plugin("amdinfer-onnx-conformance"):
        manager.register(_Summary(), "amdinfer-onnx-conformance")
    return _TALLY


# ---------------------------------------------------------------------------------------------- running
def _load(backend: str, model: onnx.ModelProto) -> amdinfer.Engine:
    return conformance.make_engine(backend, model)


def _run_case(backend: str, case: Any) -> None:
    graph = case.model.graph
    init = {t.name for t in graph.initializer}
    names = [i.name for i in graph.input if i.name not in init]
    with _load(backend, case.model) as engine:
        for inputs, expected in case.data_sets:
            feeds = dict(zip(names, (_array(v) for v in inputs)))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # inf/nan cases overflow on purpose
                got = engine.run(feeds)
            assert len(got) == len(expected)
            for out, ref in zip(graph.output, expected):
                _assert_similar(got[out.name], _array(ref), case.rtol, case.atol, out.name)


def _assert_similar(got: Any, ref: Any, rtol: float, atol: float, name: str) -> None:
    """onnx.backend.test.runner's comparison: shape, dtype, then allclose (strings: exact); a sequence item by
    item, an absent optional as ``None``."""
    if isinstance(ref, list):
        assert isinstance(got, list), f"output {name!r}: got a {type(got).__name__}, expected a list (a sequence)"
        assert len(got) == len(ref), f"output {name!r}: {len(got)} items, expected {len(ref)}"
        for i, (g, r) in enumerate(zip(got, ref)):
            _assert_similar(g, _array(r), rtol, atol, f"{name}[{i}]")
        return
    if ref is None:
        assert got is None, f"output {name!r}: got a {type(got).__name__}, expected None (an absent optional)"
        return
    assert got is not None and not isinstance(got, list), (
        f"output {name!r}: got a {type(got).__name__}, expected an array"
    )
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, f"output {name!r}: shape {got.shape}, expected {ref.shape}"
    if ref.dtype == object or ref.dtype.kind in "US":
        np.testing.assert_array_equal(got, ref, err_msg=f"output {name!r}")
        return
    assert got.dtype == ref.dtype, f"output {name!r}: dtype {got.dtype}, expected {ref.dtype}"
    if got.dtype.kind == "V":  # ml_dtypes (bfloat16, float8, int4...): compare as float32, bf16 gets 2 ULPs
        if got.dtype.name == "bfloat16":
            rtol = max(rtol, 2**-6)
        got, ref = got.astype(np.float32), ref.astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=f"output {name!r}")


def test_node_case(backend: str, case_name: str, tally: dict[str, Counter[str]]) -> None:
    why = conformance.availability(backend)
    if why is not None:
        pytest.skip(why)
    case = _cases()[case_name]
    counts = tally[backend]
    random = _match(SKIP, case_name)
    if random is not None:
        counts["skipped"] += 1
        pytest.skip(random)
    rejected = contract_rejection(case, backend)
    # A case the contract rejects is excluded by its exact name only: the patterns are written for the cases the
    # engines run, and would otherwise excuse the contract's own refusal.
    table = EXCLUDE[backend]
    excluded = _match(table, case_name) if rejected is None else table.get(case_name)
    error: Exception | None = None
    try:
        _run_case(backend, case)
    except Exception as exc:
        error = exc
    # The contract's refusal (InputError / ModelError) is the expected end of a rejected case; an excluded one
    # fails before it gets there (a plugin EP that cannot compile the model at all).
    refused = rejected is not None and isinstance(error, (InputError, ModelError))
    if excluded is None and (refused or (rejected is None and error is None)):
        counts["contract" if refused else "passed"] += 1
        return
    if excluded is not None and error is not None and not refused:
        counts["excluded"] += 1
        pytest.xfail(excluded)
    unmeasured = UNMEASURED.get(backend, {}).get(case_name)
    if unmeasured is not None and excluded is None:
        counts["unmeasured"] += 1
        if error is not None:
            pytest.xfail(f"{unmeasured}: {type(error).__name__}: {str(error)[:300]}")
        return
    counts["failed"] += 1
    if excluded is not None:
        now = "is rejected by the engine contract" if refused else "passes"
        pytest.fail(f"{case_name} is excluded for {backend!r} ({excluded}) but {now} now: remove the exclude")
    if error is None:
        pytest.fail(f"{case_name} ran, but the engine contract rejects it: {rejected}")
    raise error


def test_excludes_name_real_cases() -> None:
    """Every skip and exclude pattern matches a case, and every exclude one the suite runs, so the lists cannot rot.

    An exclude may name a case the contract rejects (the kind fails before the contract's check); one the kind
    passes, or the contract rejects as expected, fails :func:`test_node_case`.
    """
    cases = _cases()
    for pattern in SKIP:
        assert any(re.fullmatch(pattern, n) for n in cases), f"skip {pattern!r} matches no case"
    run = [n for n in cases if _match(SKIP, n) is None]
    for table in EXCLUDE.values():
        for pattern in table:
            assert any(re.fullmatch(pattern, n) for n in run), f"exclude {pattern!r} matches no case the suite runs"
    for kind, names in UNMEASURED.items():
        for name in names:
            assert name in run, f"{kind}: unmeasured {name!r} is not a case the suite runs"
            assert name not in EXCLUDE[kind], f"{kind}: {name!r} is both excluded and unmeasured"
