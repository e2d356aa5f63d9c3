"""Remake a plugin kind's known failures on ONNX's node tests: ``_node_excludes_<kind>.py`` beside this file.

Runs every node case the way ``test_onnx_conformance.py`` does (random ones left out, as there; a case the engine
contract rejects counts as a failure only when something else fails first), sorts each failure into a reason
category from its error, and writes the module that test reads, one entry per case, grouped by category with the
counts in its docstring. Run it with the plugin installed, in the environment of ``nox -s plugin_eps`` (the
versions it records are the ones that matter)::

    .nox/plugin_eps/bin/python tests/engines/make_plugin_excludes.py ort-openvino

then review the diff: a case that moved between categories, or appeared, says what changed upstream.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import re
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent

#: Reason categories, first match wins: (constant name, reason, test on (error type name, message), detail).
_NO_NODE = "OpenVINO takes no node: amdinfer's no-silent-fallback error (ONNX Runtime would run it on CPU)"
_CONVERT = "OpenVINO's ONNX frontend cannot convert the op"
_COMPILE = "OpenVINO fails to compile the converted model or to bind its inputs/outputs to the graph's"
_ML_DTYPES = "element type NumPy cannot hold (bfloat16, float8, float4, int4, int2) or returned as raw uint8"
_SHAPE = "OpenVINO's output shape differs from the spec's expected output"
_MISMATCH = "values differ from the spec's expected output beyond the case's tolerance"
_ORT = "onnxruntime itself cannot load the model (no kernel, op not in its build, locale), as on ort-cpu"
_RUN = "OpenVINO fails while running the compiled model"
_OTHER = "other failure"


def _ops(message: str) -> str:
    return ", ".join(dict.fromkeys(re.findall(r"^-- (\w+-\d+)", message, flags=re.M)))


def _openvino_says(message: str) -> str:
    """The shortest useful part of an OpenVINO error: its own sentence, the failed check, or the innermost line."""
    said = re.search(r"ov_compute\.h:\d+ - ([^.\n]+)", message)
    if said:
        return re.sub(r"\s+", " ", said.group(1)).strip()
    check = re.search(r"Check '([^']{1,60})' failed at [\w/.-]*?([\w.]+\.cpp)", message)
    if check:
        return f"check {check.group(1)!r} failed in {check.group(2)}"
    inner = re.search(r"Exception from src/[^\n]*\n(?!Exception from)([^\n]+)", message)
    return inner.group(1).split(". ")[0].strip() if inner else ""


#: OpenVINO's own words in an error (ONNX Runtime's prefix names the EP too, so that alone says nothing).
_OPENVINO = re.compile(
    r"OpenVINO-EP|intel_cpu|ov_compute|Exception from src/|failed at src/|OpenVINOExecutionProvider_\d"
)


CATEGORIES: list[tuple[str, str, Callable[[str, str], bool], Callable[[str], str]]] = [
    ("NO_NODE", _NO_NODE, lambda t, m: "took no node" in m, lambda m: ""),
    (
        "ML_DTYPES",
        _ML_DTYPES,
        lambda t, m: bool(
            re.search(
                r"can't be converted to MLDataType|No corresponding Numpy"
                r" type|dtype uint8, expected (float[48]|u?int[24])",
                m,
            )
        ),
        lambda m: "",
    ),
    ("CONVERT", _CONVERT, lambda t, m: "unconverted_ops_report" in m or "Conversion is failed" in m, _ops),
    ("COMPILE", _COMPILE, lambda t, m: "session creation failed" in m and bool(_OPENVINO.search(m)), _openvino_says),
    ("ORT", _ORT, lambda t, m: "onnxruntime cannot load it" in m or "session creation failed" in m, lambda m: ""),
    ("RUN", _RUN, lambda t, m: "failed while running" in m and bool(_OPENVINO.search(m)), _openvino_says),
    ("SHAPE", _SHAPE, lambda t, m: t == "AssertionError" and ": shape (" in m, lambda m: ""),
    ("MISMATCH", _MISMATCH, lambda t, m: t == "AssertionError", lambda m: ""),
    ("OTHER", _OTHER, lambda t, m: True, lambda m: re.sub(r"\s+", " ", m)[:80]),
]


def classify(error: BaseException) -> tuple[str, str]:
    """(category constant, detail) of one failure."""
    kind, message = type(error).__name__, str(error)
    for name, _, test, detail in CATEGORIES:
        if test(kind, message):
            return name, detail(message)
    raise AssertionError("unreachable: OTHER matches everything")


def run(kind: str) -> tuple[dict[str, tuple[str, str]], Counter[str]]:
    """Every runnable node case on ``kind``: failures (case -> category, detail) and the tally."""
    sys.path.insert(0, str(HERE))
    import test_onnx_conformance as suite

    from amdinfer.errors import InputError, ModelError
    from amdinfer.testing import conformance

    if kind not in conformance.ENGINE_KINDS:
        raise SystemExit(f"engine kind {kind!r} is not registered here (is its plugin installed?)")
    why = conformance.availability(kind)
    if why is not None:
        raise SystemExit(f"engine kind {kind!r} cannot run here: {why}")
    failures: dict[str, tuple[str, str]] = {}
    tally: Counter[str] = Counter()
    for name, case in sorted(suite._cases().items()):
        if suite._match(suite.SKIP, name) is not None:
            tally["skipped"] += 1
            continue
        rejected = suite.contract_rejection(case) is not None
        try:
            suite._run_case(kind, case)
        except (InputError, ModelError) as exc:
            if rejected:  # the contract's refusal: the expected end, not a failure
                tally["contract"] += 1
                continue
            failures[name] = classify(exc)
        except Exception as exc:
            failures[name] = classify(exc)
        else:
            if rejected:
                raise SystemExit(f"{name}: ran on {kind!r}, but the engine contract rejects it")
            tally["passed"] += 1
            continue
        tally["excluded"] += 1
    return failures, tally


def _versions() -> str:
    plugins = (d.metadata["Name"] for d in importlib.metadata.distributions())
    names = ["onnx", "onnxruntime", *sorted(n for n in plugins if n.startswith("onnxruntime-ep-"))]
    return ", ".join(f"{n} {importlib.metadata.version(n)}" for n in dict.fromkeys(names))


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    model = re.search(r"^model name\s*:\s*(.+)$", info, flags=re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, flags=re.M)
    isa = sorted(
        {
            f
            for f in (flags.group(1).split() if flags else [])
            if f.startswith(("avx2", "avx512f", "avx512_bf16", "amx"))
        }
    )
    return f"{model.group(1).strip() if model else platform.machine()} ({', '.join(isa) or 'no AVX2'})"


def _cut(text: str, width: int) -> str:
    """``text`` if it fits in ``width`` characters, else its words that do."""
    return text if len(text) <= width else text[: width + 1].rsplit(" ", 1)[0]


def render(kind: str, failures: dict[str, tuple[str, str]], tally: Counter[str]) -> str:
    """The ``_node_excludes_<kind>.py`` module: docstring with the run and counts, reasons, one entry per case."""
    by_category = Counter(category for category, _ in failures.values())
    order = [name for name, _, _, _ in CATEGORIES if by_category[name]]
    reasons = {name: reason for name, reason, _, _ in CATEGORIES}
    run = (
        f"Run: {_versions()}; {_cpu()}. Of {sum(tally.values())} node cases: {tally['passed']} "
        f"passed, {tally['excluded']} excluded (below), {tally['contract']} rejected by the engine contract, "
        f"{tally['skipped']} skipped (random). The excluded, by reason:"
    )
    lines = [
        f'"""Known failures of kind ``{kind}`` on ONNX\'s backend node tests, one entry per case, by reason.',
        "",
        f"Made by ``python tests/engines/make_plugin_excludes.py {kind}`` from a run; do not edit by hand, remake it",
        "(``test_onnx_conformance.py`` fails on an excluded case that passes, and on a new failure).",
        "",
        *textwrap.wrap(run, 116),
        "",
        *(f"* {by_category[name]:>3} {name}" for name in order),
        '"""',
        "",
        f"KIND = {json.dumps(kind)}",
        "",
        *(f"{name} = {json.dumps(reasons[name])}" for name in order),
        "",
        "EXCLUDE: dict[str, str] = {",
    ]
    for category in order:
        cases = sorted(n for n, (c, _) in failures.items() if c == category)
        lines.append(f"    # {category}: {len(cases)}")
        for case in cases:
            line = f"    {json.dumps(case)}: {category}"
            detail = _cut(failures[case][1], 120 - len(line) - len(' + ": ",'))
            lines.append(f"{line} + {json.dumps(': ' + detail)}," if len(detail) > 12 else f"{line},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", help="the plugin's engine kind, e.g. ort-openvino")
    parser.add_argument("--out", type=Path, help="where to write (default: _node_excludes_<kind>.py beside this file)")
    args = parser.parse_args(argv)
    failures, tally = run(args.kind)
    out = args.out or HERE / f"_node_excludes_{args.kind.replace('-', '_')}.py"
    out.write_text(render(args.kind, failures, tally))
    print(f"{out}: {len(failures)} excluded; {dict(tally)}")


if __name__ == "__main__":
    main()
