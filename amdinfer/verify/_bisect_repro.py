"""``bisect``'s reproducer: the culprit's region cut out of each side's graph, run alone, and written to a folder.

:func:`_region` extracts the diverging node (and the nodes it stands for) from each side's graph with its
inputs as graph inputs; :func:`_run_region` runs that region on both sides the way each ran the full model;
:func:`_search_local` walks on from the first divergence to the first node that diverges alone;
:func:`_write_reproducer` writes the models, ``inputs.npz``, both sides' outputs, ``bisect.json`` and a README.

Example:
    >>> _flags({"backend": "ort", "providers": ["CPUExecutionProvider"], "precision": "fp32"}, against=True)
    ['--against', 'ort', '--against-providers', 'CPUExecutionProvider']
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import InputError, OptionError
from ._bisect_report import BisectReport, BisectStep, Reproducer
from ._bisect_walk import _Walk, judge
from ._report import TensorReport
from ._tensor import _kind

__all__: list[str] = []


def _check_out_dir(out_dir: str | Path) -> Path:
    from .._support._files import check_path

    p = check_path(out_dir, "out_dir").expanduser()
    if p.exists() and not p.is_dir():
        raise OptionError(f"out_dir: got {str(out_dir)!r}, a file; expected a folder (created if missing)")
    if not p.parent.is_dir():
        raise OptionError(f"out_dir: got {str(out_dir)!r}, but folder '{p.parent}' does not exist")
    return p


def _value_info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
    return onnx.helper.make_tensor_value_info(name, elem, list(value.shape))


def _extract(
    proto: onnx.ModelProto,
    outputs: list[str],
    stop: set[str],
    values: Mapping[str, np.ndarray],
    input_values: Mapping[str, np.ndarray],
    rename: Mapping[str, str],
) -> onnx.ModelProto:
    """The nodes that compute ``outputs`` from the tensors in ``stop`` (graph inputs of the result) and constants.

    ``values`` give the outputs' types and ``input_values`` the inputs' (in the reproducer's dtype: a Cast to the
    graph's own dtype is added where they differ, e.g. a float16 graph fed float32); ``rename`` renames tensors.
    """
    g = proto.graph
    producer = {t: i for i, n in enumerate(g.node) for t in n.output if t}
    inits = {t.name: t for t in g.initializer}
    graph_inputs = {i.name for i in g.input}
    keep: set[int] = set()
    needed_inits: list[str] = []
    inputs: list[str] = []
    todo = list(outputs)
    seen: set[str] = set()
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        if t in stop or (t in graph_inputs and t not in inits):
            inputs.append(t)
        elif t in inits:
            needed_inits.append(t)
        elif t in producer:
            keep.add(producer[t])
            node = g.node[producer[t]]
            todo.extend(node.input)
            for attr in node.attribute:  # a subgraph's outer-scope names
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    local = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
                    local |= {i.name for i in sub.initializer}
                    todo.extend(x for n in sub.node for x in n.input if x and x not in local)
        else:
            raise InputError(f"reproducer: tensor {t!r} has no producer, initializer or input in the graph")
    nodes = [onnx.NodeProto() for _ in sorted(keep)]
    for dst, i in zip(nodes, sorted(keep)):
        dst.CopyFrom(g.node[i])
    new_inputs, casts = [], []
    for t in sorted(inputs, key=lambda x: list(input_values).index(x) if x in input_values else 0):
        fed = input_values[t]
        own = values.get(t)
        if own is not None and own.dtype != fed.dtype and _kind(own) == _kind(fed) == "f":
            inner = f"{t}__as_{own.dtype}"
            for n in nodes:
                n.input[:] = [inner if x == t else x for x in n.input]
            to = onnx.helper.np_dtype_to_tensor_dtype(own.dtype)
            casts.append(onnx.helper.make_node("Cast", [t], [inner], name=f"{t}__cast", to=to))
        new_inputs.append(_value_info(t, fed))
    graph = onnx.helper.make_graph(
        casts + nodes,
        "amdinfer_bisect_reproducer",
        new_inputs,
        [_value_info(t, values[t]) for t in outputs],
        [inits[t] for t in sorted(set(needed_inits))],
    )
    model = onnx.helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    model.functions.extend(proto.functions)
    _rename(model, rename)
    return model


def _rename(model: onnx.ModelProto, rename: Mapping[str, str]) -> None:
    if not rename:
        return
    g = model.graph
    for n in g.node:
        n.input[:] = [rename.get(x, x) for x in n.input]
        n.output[:] = [rename.get(x, x) for x in n.output]
    for v in [*g.input, *g.output]:
        v.name = rename.get(v.name, v.name)


def _actual_rename(proto: onnx.ModelProto, outputs: list[str], vis: Mapping[str, str]) -> tuple[list[str], dict]:
    """The quantized side's tensors for ``outputs`` and the renames that give them the float names."""
    names = {t for n in proto.graph.node for t in n.output}
    targets, rename = [], {}
    for t in outputs:
        seen = vis.get(t, t)
        targets.append(seen)
        if seen != t:
            rename[seen] = t
            if t in names:
                rename[t] = f"{t}_QuantizeLinear_Input"
    return targets, rename


def _pad_inputs(model: onnx.ModelProto, wanted: Mapping[str, np.ndarray]) -> None:
    """Add the inputs the other side's reproducer takes and this one does not (unused): one inputs file for both."""
    have = {i.name for i in model.graph.input}
    for t, v in wanted.items():
        if t not in have:
            model.graph.input.append(_value_info(t, v))


def _load_spec(engine: Any, same_model: bool) -> dict[str, Any]:
    """``amdinfer.load`` options that run a reproducer the way ``engine`` ran the full model."""
    info = engine.info
    spec: dict[str, Any] = {"backend": info.backend}
    if info.backend == "ort" and info.providers:
        spec["providers"] = list(info.providers)
    precision = info.precision
    if not same_model and precision in ("fp16", "bf16", "int8"):
        precision = "fp32"  # the extracted graph is the rewritten one already (fp16 casts, Q/DQ)
    spec["precision"] = precision
    return spec


def _flags(spec: Mapping[str, Any], against: bool) -> list[str]:
    if against:
        flags = ["--against", spec["backend"]]
        if "providers" in spec:
            flags += ["--against-providers", ",".join(spec["providers"])]
        if spec["backend"] == "reference" and spec["precision"] in ("fp64", "fp32"):
            flags += ["--reference-precision", spec["precision"]]
        return flags
    flags = ["--backend", spec["backend"]]
    if "providers" in spec:
        flags += ["--providers", ",".join(spec["providers"])]
    return [*flags, "--precision", spec["precision"]]


@dataclass
class _Region:
    """A node's reproducer in memory: the models per side, the inputs, both sides' outputs in the full run."""

    models: dict[str, onnx.ModelProto]
    inputs: dict[str, np.ndarray]
    expected: dict[str, Any]
    actual: dict[str, Any]
    outputs: list[str]
    same: bool


def _region(walk: _Walk, a: Any, b: Any, step: BisectStep, region_inputs: list[str]) -> _Region:
    """Extract ``step``'s node (and the nodes it stands for) from each side's graph, inputs as graph inputs."""
    outputs = list(step.outputs)
    expected_in = {t: np.asarray(walk.values[t][1] if t in walk.values else walk.feeds[t]) for t in region_inputs}
    exp_vals = {t: walk.values[t][1] for t in outputs}
    act_vals = {t: walk.values[t][0] for t in outputs}
    walk_is_b = walk.proto is walk.pb
    stop = (set(walk.reports) | set(walk.graph_inputs)) - set(outputs)
    float_vals = {**{t: v[1 if walk_is_b else 0] for t, v in walk.values.items()}, **expected_in}
    float_model = _extract(walk.proto, outputs, stop, float_vals, expected_in, {})
    same = a.model.sha256 == b.model.sha256
    models: dict[str, onnx.ModelProto] = {}
    if same:
        models["model"] = float_model
    else:
        other, side = (walk.pa, "a") if walk_is_b else (walk.pb, "b")
        run = walk.ra if side == "a" else walk.rb
        vis = walk.vis_a if side == "a" else walk.vis_b
        targets, rename = _actual_rename(other, outputs, vis)
        other_names = {t for n in other.graph.node for t in n.output} | {i.name for i in other.graph.input}
        other_stop = {t for t in stop if t in other_names}
        own_vals = {**{k: np.asarray(v) for k, v in run.items() if isinstance(v, np.ndarray)}, **walk.feeds}
        fed = {t: expected_in.get(t, float_vals.get(t)) for t in other_stop}
        try:
            other_model = _extract(
                other, targets, other_stop, own_vals, {k: v for k, v in fed.items() if v is not None}, rename
            )
        except InputError as exc:
            raise InputError(f"reproducer of the {'actual' if side == 'a' else 'expected'} side: {exc}") from None
        for i in other_model.graph.input:
            v = expected_in.get(i.name, fed.get(i.name))
            if i.name not in expected_in and v is not None:
                expected_in[i.name] = np.asarray(v)
        _pad_inputs(float_model, expected_in)
        _pad_inputs(other_model, expected_in)
        fm, om = ("expected_model", "actual_model") if walk_is_b else ("actual_model", "expected_model")
        models[fm], models[om] = float_model, other_model
    return _Region(models, expected_in, exp_vals, act_vals, outputs, same)


def _run_region(region: _Region, a: Any, b: Any, walk: _Walk) -> tuple[bool | None, dict[str, TensorReport], str]:
    """Run the region on both sides (as each side ran the full model): (diverges?, comparisons, what it means)."""
    from .._load import load

    spec_a, spec_b = _load_spec(a, region.same), _load_spec(b, region.same)
    ma = region.models["model"] if region.same else region.models["actual_model"]
    mb = region.models["model"] if region.same else region.models["expected_model"]
    try:
        with load(ma, **spec_a) as ea, load(mb, **spec_b) as eb:
            xa, xb = ea.run(dict(region.inputs)), eb.run(dict(region.inputs))
    except Exception as exc:  # the check is best effort: the files are written either way
        return None, {}, f"not run: {type(exc).__name__}: {exc}"
    check = {t: judge(t, xa[t], xb[t], precision=walk.prec, **walk.tol) for t in region.outputs}
    reproduced = not all(r.passed for r in check.values())
    note = (
        "the node alone, fed the expected side's inputs, diverges the same way: the fault is in the node"
        if reproduced
        else "the node alone agrees on exact inputs: the divergence comes from how it amplifies its inputs' "
        "small (within tolerance) errors"
    )
    return reproduced, check, note


def _search_local(report: BisectReport, walk: _Walk, a: Any, b: Any, limit: int) -> _Region | None:
    """From the first divergence on, the first diverging node that diverges alone on the expected side's inputs.

    A node that does not (it amplifies its inputs' small errors) is marked ``"amplifies"`` and the search goes
    on; the one found becomes the culprit (``first_divergence`` keeps the first node over tolerance).
    """
    first = report.culprit
    assert first is not None
    tried = 0
    for step in report.steps[first.index :]:
        if step.status not in ("diverges", "inherited"):
            continue
        if tried >= limit:
            break
        tried += 1
        ins, group = walk.effective_inputs(step.index)
        region = _region(walk, a, b, step, ins)
        reproduced, check, note = _run_region(region, a, b, walk)
        if reproduced is False:
            step.status = "amplifies"
            continue
        step.status = "diverges"
        report.culprit = step
        report.group = [report.steps[i].node for i in group]
        report.inputs = {t: walk.reports.get(t) for t in ins}
        walk.region_inputs = ins
        report.local = (reproduced, check, note)
        return region
    report.culprit = None  # every diverging node only amplifies its inputs' errors (or the limit was reached)
    report.local_checks = tried
    return None


def _write_reproducer(
    out: Path, report: BisectReport, walk: _Walk, a: Any, b: Any, *, check: bool, region: _Region | None = None
) -> Reproducer:
    from .._support._files import write_atomic
    from ._golden import save_golden

    culprit = report.culprit
    assert culprit is not None
    out.mkdir(exist_ok=True)
    if region is None:
        region = _region(walk, a, b, culprit, list(walk.region_inputs))
    files: dict[str, Path] = {}
    names = {"model": "model.onnx", "actual_model": "actual.onnx", "expected_model": "expected.onnx"}
    for key, m in region.models.items():
        files[key] = write_atomic(out / names[key], m.SerializeToString(), argument="out_dir")
    arrays = dict(region.inputs)
    files["inputs"] = write_atomic(out / "inputs.npz", lambda f: np.savez(f, **arrays), argument="out_dir")  # type: ignore[arg-type]
    meta_e, meta_a = {"engine": report.expected}, {"engine": report.actual}
    files["expected"] = save_golden(out / "expected.npz", region.inputs, region.expected, meta_e, what="out_dir")
    files["actual"] = save_golden(out / "actual.npz", region.inputs, region.actual, meta_a, what="out_dir")
    spec_a, spec_b = _load_spec(a, region.same), _load_spec(b, region.same)
    positional = [str(files["model"])] if region.same else [str(files["actual_model"]), str(files["expected_model"])]
    cmd = ["amdinfer", "verify", *positional, "--inputs", str(files["inputs"])]
    command = shlex.join([*cmd, *_flags(spec_a, False), *_flags(spec_b, True)])
    repro = Reproducer(out, files, command, None)
    if report.local is not None:
        repro.reproduced, repro.check, repro.note = report.local
    elif check:
        repro.reproduced, repro.check, repro.note = _run_region(region, a, b, walk)
    files["report"] = write_atomic(
        out / "bisect.json",
        json.dumps(report.to_dict() | {"reproducer": repro.to_dict()}, indent=2).encode(),
        argument="out_dir",
    )
    files["readme"] = write_atomic(out / "README.md", _readme(report, repro).encode(), argument="out_dir")
    return repro


def _readme(report: BisectReport, repro: Reproducer) -> str:
    c = report.culprit
    assert c is not None
    lines = [
        f"# amdinfer bisect: node {c.node!r} ({c.op_type})",
        "",
        f"actual: {report.actual}; expected: {report.expected}; precision {report.precision}",
        "",
        report.verdict,
        "",
        "```",
        report.table(top=0),
        "```",
        "",
        "Files: " + ", ".join(f"`{p.name}` ({k})" for k, p in repro.files.items()),
        "(inputs.npz: one array per input, captured from the expected side; expected.npz / actual.npz: the",
        "golden format of `amdinfer verify --golden`, the inputs and each side's outputs in the full model).",
        "",
        "Reproduce:",
        "",
        "```console",
        f"$ {repro.command}",
        "```",
        "",
        f"Checked: {repro.note}" if repro.note else "",
    ]
    return "\n".join(lines) + "\n"
