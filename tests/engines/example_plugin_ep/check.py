# ruff: noqa: E501  (the child scripts are string literals the formatter cannot wrap)
"""End-to-end check of ONNX Runtime's example plugin EPs (built by build.sh) directly and through amdinfer.

Run: venv/bin/python check.py   (prints the device list and one results table; exit 0 even when rows fail:
the table is the result). Each amdinfer case runs in its own Python process, so that registrations made by
one case (ONNX Runtime registers a library once per process) cannot hide another's behaviour.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
LIBS = {
    "example_plugin_ep": BUILD / "libexample_plugin_ep.so",
    "example_plugin_ep_compat": BUILD / "libexample_plugin_ep_compat.so",
    "example_plugin_ep_virt_gpu": BUILD / "libexample_plugin_ep_virt_gpu.so",
    "example_plugin_ep_kernel_registry": BUILD / "libexample_plugin_ep_kernel_registry.so",
}
ROWS: list[tuple[str, str, str, str]] = []  # (step, case, OK/FAIL/EXPECTED-FAIL, detail)


def row(step: str, case: str, status: str, detail: str) -> None:
    ROWS.append((step, case, status, " ".join(str(detail).split())[:400]))


# --------------------------------------------------------------------------------------------- models
MODELS = r'''
import numpy as np
from onnx import TensorProto, helper

def _model(nodes, inputs, outputs, opset):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m.SerializeToString()

def mul_add():
    """y = a*b + a: the Mul goes to example_plugin_ep (it takes one float Mul of equal static shapes), Add to CPU."""
    return _model([helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "a"], ["y"])],
                  [("a", [2, 3]), ("b", [2, 3])], [("y", [2, 3])], 17)

def mul_only():
    return _model([helper.make_node("Mul", ["a", "b"], ["y"])], [("a", [2, 3]), ("b", [2, 3])], [("y", [2, 3])], 17)

def sub_relu_mul():
    """y = relu(a-b)*a, opset 21: ExampleKernelEp registers kernels for Sub, Mul (14+), Relu (14+)."""
    return _model([helper.make_node("Sub", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
                   helper.make_node("Mul", ["r", "a"], ["y"])], [("a", [2, 3]), ("b", [2, 3])], [("y", [2, 3])], 21)

def add_only():
    return _model([helper.make_node("Add", ["a", "b"], ["y"])], [("a", [2, 3]), ("b", [2, 3])], [("y", [2, 3])], 17)

rng = np.random.default_rng(0)
A = rng.standard_normal((2, 3)).astype(np.float32)
B = rng.standard_normal((2, 3)).astype(np.float32)
TRUTH = {"mul_add": A * B + A, "mul_only": A * B, "sub_relu_mul": np.maximum(A - B, 0) * A, "add_only": A + B}
'''


def run_py(code: str, env: dict[str, str] | None = None, pythonpath: str | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object last."""
    full = {**os.environ, **(env or {})}
    if pythonpath:
        full["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, full.get("PYTHONPATH", "")]))
    prog = MODELS + "\nimport json, sys, traceback\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", prog], env=full, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"_crash": f"rc={done.returncode} stdout={done.stdout[-800:]} stderr={done.stderr[-1500:]}"}


# --------------------------------------------------------------------------------------------- step 3: ORT
STEP3 = r"""
import onnxruntime as ort
out = {"devices": [], "cases": []}
def case(name, fn):
    try:
        status, detail = fn()
    except Exception as exc:
        status, detail = "FAIL", f"{type(exc).__name__}: {exc}"
    out["cases"].append([name, status, detail])

REG = {"example_plugin_ep": "example_ep", "example_plugin_ep_compat": "example_ep_compat", "example_plugin_ep_virt_gpu": "example_vgpu.virtual",
       "example_plugin_ep_kernel_registry": "example_kernel"}
LIBS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else LIBS_JSON
for lib, reg in REG.items():
    case(f"register {lib} as {reg!r}", lambda: (ort.register_execution_provider_library(reg, LIBS[lib]), ("OK", "registered"))[1])
for d in ort.get_ep_devices():
    hw = d.device
    out["devices"].append({"ep_name": d.ep_name, "ep_vendor": d.ep_vendor, "type": str(hw.type).rpartition(".")[2],
                           "hw_vendor": hw.vendor, "vendor_id": hex(hw.vendor_id), "device_id": hw.device_id,
                           "hw_metadata": dict(hw.metadata), "ep_metadata": dict(d.ep_metadata),
                           "ep_options": dict(d.ep_options)})

def dev(name):
    return [d for d in ort.get_ep_devices() if d.ep_name == name]

def session(model, ep, opts=None, extra=None):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    for k, v in (extra or {}).items():
        so.add_session_config_entry(k, v)
    so.add_provider_for_devices(dev(ep), opts or {})
    return ort.InferenceSession(model, sess_options=so)

def placement(s):
    out = {}
    for sub in s.get_provider_graph_assignment_info():
        out.setdefault(sub.ep_name, []).extend(n.op_type for n in sub.get_nodes())
    return out

def run_case(model_name, ep):
    s = session(globals()[model_name](), ep)
    y = s.run(None, {"a": A, "b": B})[0]
    err = float(abs(y - TRUTH[model_name]).max())
    ok = err <= 1e-6 and ep in placement(s)
    return ("OK" if ok else "FAIL"), f"providers={s.get_providers()} nodes={placement(s)} max|y-numpy|={err:.2e}"

case("example_ep: run Mul+Add", lambda: run_case("mul_add", "example_ep"))
case("example_ep_compat: run Mul+Add", lambda: run_case("mul_add", "example_ep_compat"))
case("ExampleKernelEp: run Sub+Relu+Mul", lambda: run_case("sub_relu_mul", "ExampleKernelEp"))

def vgpu():
    s = session(add_only(), "EpVirtualGpu")
    try:
        s.run(None, {"a": A, "b": B})
    except Exception as exc:
        return "EXPECTED-FAIL", f"session built, nodes={placement(s)}; run: {type(exc).__name__}: {exc}"
    return "FAIL", "virtual GPU ran an op (it is documented not to)"
case("EpVirtualGpu: session + run Add", vgpu)

def compile_case(ep, model_name, embed):
    so = ort.SessionOptions()
    so.add_provider_for_devices(dev(ep), {})
    c = ort.ModelCompiler(so, globals()[model_name](), embed_compiled_data_into_model=embed)
    data = c.compile_to_bytes()
    import onnx
    m = onnx.load_from_string(data)
    ops = [(n.op_type, n.domain) for n in m.graph.node]
    ctx = [n for n in m.graph.node if n.op_type == "EPContext"]
    attrs = {a.name: (onnx.helper.get_attribute_value(a)) for a in ctx[0].attribute} if ctx else {}
    attrs = {k: (v.decode()[:60] if isinstance(v, bytes) else v) for k, v in attrs.items()}
    return data, ops, attrs

def compile_and_rerun(ep, model_name, embed):
    data, ops, attrs = compile_and_rerun.last = compile_case(ep, model_name, embed)
    if not any(o == "EPContext" for o, _ in ops):
        return "FAIL", f"compiled model has no EPContext node: {ops}"
    detail = f"compiled {len(data)} B, nodes={ops}, EPContext attrs={attrs}"
    try:
        s = session(data, ep)
        y = s.run(None, {"a": A, "b": B})[0]
        err = float(abs(y - TRUTH[model_name]).max())
        return ("OK" if err <= 1e-6 else "FAIL"), detail + f"; reload+run: nodes={placement(s)} max|y-numpy|={err:.2e}"
    except Exception as exc:
        return "PARTIAL", detail + f"; reload+run of the compiled model: {type(exc).__name__}: {exc}"

case("ModelCompiler example_ep (embed=1) Mul", lambda: compile_and_rerun("example_ep", "mul_only", True))
case("ModelCompiler example_ep (embed=0) Mul", lambda: compile_and_rerun("example_ep", "mul_only", False))
def vgpu_compile():
    data, ops, attrs = compile_case("EpVirtualGpu", "add_only", True)
    ok = any(o == "EPContext" for o, _ in ops)
    return ("OK" if ok else "FAIL"), f"compiled {len(data)} B for the virtual GPU, nodes={ops}, EPContext attrs={attrs}"
case("ModelCompiler example_ep_compat (embed=1) Mul", lambda: compile_and_rerun("example_ep_compat", "mul_only", True))
def compat_file():
    import tempfile, os
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "mul.onnx"); dst = os.path.join(d, "mul_ctx.onnx")
        open(src, "wb").write(mul_only())
        so = ort.SessionOptions(); so.add_provider_for_devices(dev("example_ep_compat"), {})
        ort.ModelCompiler(so, src, embed_compiled_data_into_model=False).compile_to_file(dst)
        files = sorted(os.listdir(d))
        try:
            s = session(dst, "example_ep_compat")
            y = s.run(None, {"a": A, "b": B})[0]
            err = float(abs(y - TRUTH["mul_only"]).max())
            return ("OK" if err <= 1e-6 else "FAIL"), f"files={files}; reload+run nodes={placement(s)} max|y-numpy|={err:.2e}"
        except Exception as exc:
            return "PARTIAL", f"files={files}; reload+run of the compiled model: {type(exc).__name__}: {exc}"
case("ModelCompiler example_ep_compat (embed=0, compile_to_file) Mul", compat_file)
case("ModelCompiler EpVirtualGpu (embed=1) Add", vgpu_compile)
def kernel_compile():
    try:
        data, ops, attrs = compile_case("ExampleKernelEp", "sub_relu_mul", True)
    except Exception as exc:
        return "EXPECTED-FAIL", f"{type(exc).__name__}: {exc}"
    return "INFO", f"compiled {len(data)} B nodes={ops} (a kernel-registry EP makes no EPContext node)"
case("ModelCompiler ExampleKernelEp Sub+Relu+Mul", kernel_compile)
print(json.dumps(out))
"""


# --------------------------------------------------------------------------------------------- step 4: amdinfer
def amdinfer_load(providers: list[str], lib: str, model: str, backend: str = "ort") -> str:
    return f"""
import amdinfer, numpy as np
try:
    eng = amdinfer.load({model}(), backend={backend!r}, providers={providers!r}, ep_library={lib!r})
    y = eng.run({{"a": A, "b": B}})
    y = list(y.values())[0] if isinstance(y, dict) else (y[0] if isinstance(y, (list, tuple)) else y)
    err = float(np.abs(np.asarray(y) - TRUTH[{model!r}]).max())
    pe = eng.info.settings.get("plugin_ep")
    print(json.dumps({{"ok": err <= 1e-6 and pe is not None, "backend": eng.info.backend,
                      "providers": list(eng.info.providers), "plugin_ep": pe, "err": err}}))
except Exception as exc:
    print(json.dumps({{"ok": False, "error": f"{{type(exc).__name__}}: {{exc}}"}}))
"""


def step4() -> None:
    ep, kr, vg, cp = (
        str(LIBS[k])
        for k in (
            "example_plugin_ep",
            "example_plugin_ep_kernel_registry",
            "example_plugin_ep_virt_gpu",
            "example_plugin_ep_compat",
        )
    )
    # amdinfer registers a library as "amdinfer:<file name>"; example_plugin_ep names its EP after the registration name
    cases = [
        ("load ExampleKernelEp via ep_library=", amdinfer_load(["ExampleKernelEp"], kr, "sub_relu_mul")),
        (
            "load example_plugin_ep via ep_library=, providers=['amdinfer:libexample_plugin_ep.so']",
            amdinfer_load(["amdinfer:libexample_plugin_ep.so"], ep, "mul_add"),
        ),
        (
            "load example_plugin_ep via ep_library=, providers=['example_ep'] (the name ORT's own tests use)",
            amdinfer_load(["example_ep"], ep, "mul_add"),
        ),
        (
            "load example_plugin_ep_compat via ep_library=, providers=['amdinfer:libexample_plugin_ep_compat.so']",
            amdinfer_load(["amdinfer:libexample_plugin_ep_compat.so"], cp, "mul_add"),
        ),
        (
            "load ExampleKernelEp on a model it takes no node of (Add)",
            amdinfer_load(["ExampleKernelEp"], kr, "add_only"),
        ),
        (
            "load EpVirtualGpu via ep_library= (registration name lacks '.virtual')",
            amdinfer_load(["EpVirtualGpu"], vg, "add_only"),
        ),
    ]
    for name, code in cases:
        r = run_py(code)
        if "_crash" in r:
            row("4", name, "FAIL", r["_crash"])
        elif r.get("ok"):
            row(
                "4",
                name,
                "OK",
                f"backend={r['backend']} providers={r['providers']} plugin_ep={r['plugin_ep']} "
                f"max|y-numpy|={r['err']:.2e}",
            )
        else:
            row("4", name, "FAIL" if "error" not in r else "ERROR", r.get("error") or json.dumps(r))

    # doctor with $AMDINFER_EP_LIBRARIES
    env = {"AMDINFER_EP_LIBRARIES": os.pathsep.join([kr, ep, vg])}
    full = {**os.environ, **env}
    done = subprocess.run(
        [sys.executable, "-m", "amdinfer", "doctor", "--json", "-q"],
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        rep = json.loads(done.stdout)
        lines = rep.get("ep_plugins")
        row(
            "4",
            "python -m amdinfer doctor --json with AMDINFER_EP_LIBRARIES=kernel:example:virt_gpu",
            "OK" if done.returncode == 0 and lines else "FAIL",
            f"rc={done.returncode} ep_plugins={lines} problems={rep.get('problems')}",
        )
    except json.JSONDecodeError:
        row("4", "doctor --json", "FAIL", f"rc={done.returncode} {done.stdout[-500:]} {done.stderr[-800:]}")
    done = subprocess.run(
        [sys.executable, "-m", "amdinfer", "doctor"], env=full, capture_output=True, text=True, timeout=600
    )
    plug = [ln for ln in done.stdout.splitlines() if "AMDINFER_EP_LIBRARIES" in ln or "plugin" in ln.lower()]
    row(
        "4",
        "python -m amdinfer doctor (text) plugin lines",
        "OK" if done.returncode == 0 else "FAIL",
        f"rc={done.returncode} " + " || ".join(plug)[:380],
    )

    # a fake installed distribution onnxruntime-ep-example, found by backend="auto"
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        (site / "onnxruntime_ep_example").mkdir()
        (site / "onnxruntime_ep_example" / "__init__.py").write_text(
            f"def get_library_path():\n    return {kr!r}\n\ndef get_ep_names():\n    return ['ExampleKernelEp']\n"
        )
        info = site / "onnxruntime_ep_example-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-ep-example\nVersion: 0.1.0\n")
        (info / "top_level.txt").write_text("onnxruntime_ep_example\n")
        code = """
import amdinfer, numpy as np
from amdinfer.doctor import diagnose
r = diagnose()
line = r.ep_plugins.get("onnxruntime-ep-example")
try:
    eng = amdinfer.load(sub_relu_mul(), backend="auto")
    y = eng.run({"a": A, "b": B}); y = list(y.values())[0] if isinstance(y, dict) else y
    err = float(np.abs(np.asarray(y) - TRUTH["sub_relu_mul"]).max())
    pe = eng.info.settings.get("plugin_ep")
    print(json.dumps({"ok": err <= 1e-6 and eng.info.providers[0] == "ExampleKernelEp", "line": line,
                      "backend": eng.info.backend, "providers": list(eng.info.providers), "plugin_ep": pe,
                      "skipped": [str(s) for s in getattr(eng.info, "skipped", [])][:4], "err": err}))
except Exception as exc:
    print(json.dumps({"ok": False, "line": line, "error": f"{type(exc).__name__}: {exc}"}))
"""
        r = run_py(code, pythonpath=str(site))
        status = "OK" if r.get("ok") else "FAIL"
        row(
            "4",
            "fake dist onnxruntime-ep-example (ExampleKernelEp): doctor line",
            "OK" if r.get("line") else "FAIL",
            str(r.get("line") or r.get("_crash")),
        )
        row(
            "4",
            "fake dist onnxruntime-ep-example: amdinfer.load(backend='auto') + run",
            status,
            r.get("error")
            or f"backend={r.get('backend')} providers={r.get('providers')} plugin_ep={r.get('plugin_ep')}"
            f" skipped={r.get('skipped')} max|y-numpy|={r.get('err')}",
        )
        code2 = code.replace('sub_relu_mul(), backend="auto"', "sub_relu_mul(), providers=['examplekernelep']")
        r = run_py(code2, pythonpath=str(site))
        row(
            "4",
            "fake dist: amdinfer.load(providers=['examplekernelep']) (short name)",
            "OK" if r.get("ok") else "FAIL",
            r.get("error") or f"backend={r.get('backend')} providers={r.get('providers')} max|y-numpy|={r.get('err')}",
        )

    # a package that declares an EP name the library does not register under amdinfer (example_plugin_ep_compat names
    # its EP after the registration name, which amdinfer makes "amdinfer:<file>")
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        (site / "onnxruntime_ep_examplecompat").mkdir()
        (site / "onnxruntime_ep_examplecompat" / "__init__.py").write_text(
            f"def get_library_path():\n    return {cp!r}\n\ndef get_ep_names():\n    return ['example_ep']\n"
        )
        info = site / "onnxruntime_ep_examplecompat-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-ep-examplecompat\nVersion: 0.1.0\n")
        (info / "top_level.txt").write_text("onnxruntime_ep_examplecompat\n")
        code = """
import amdinfer, numpy as np
from amdinfer.doctor import diagnose
line = diagnose().ep_plugins.get("onnxruntime-ep-examplecompat")
res = {"line": line}
for prov in (["example_ep"], ["amdinfer:libexample_plugin_ep_compat.so"]):
    try:
        eng = amdinfer.load(mul_add(), providers=prov)
        y = eng.run({"a": A, "b": B}); y = list(y.values())[0] if isinstance(y, dict) else y
        res[prov[0]] = f"OK providers={list(eng.info.providers)} max|y-numpy|={float(np.abs(np.asarray(y) - TRUTH['mul_add']).max()):.1e}"
    except Exception as exc:
        res[prov[0]] = f"{type(exc).__name__}: {exc}"
print(json.dumps(res))
"""
        r = run_py(code, pythonpath=str(site))
        row(
            "4",
            "fake dist onnxruntime-ep-examplecompat declaring 'example_ep': doctor line",
            "INFO",
            str(r.get("line") or r.get("_crash")),
        )
        for prov in ("example_ep", "amdinfer:libexample_plugin_ep_compat.so"):
            v = str(r.get(prov))
            row("4", f"  ... amdinfer.load(providers=[{prov!r}])", "OK" if v.startswith("OK") else "ERROR", v)


def main() -> int:
    missing = [str(p) for p in LIBS.values() if not p.is_file()]
    if missing:
        print(f"missing {missing}: run build.sh first")
        return 1
    import onnxruntime

    print(f"onnxruntime {onnxruntime.__version__}; python {sys.executable}")
    t = time.perf_counter()
    code = STEP3.replace("LIBS_JSON", json.dumps({k: str(v) for k, v in LIBS.items()}))
    r = run_py(code)
    if "_crash" in r:
        row("3", "direct onnxruntime", "FAIL", r["_crash"])
    else:
        print("\nEP devices (onnxruntime.get_ep_devices()):")
        for d in r["devices"]:
            print(
                f"  {d['ep_name']:<18} ep_vendor={d['ep_vendor']:<10} {d['type']:<4} hw_vendor={d['hw_vendor']} "
                f"({d['vendor_id']}) hw_meta={d['hw_metadata']} ep_meta={d['ep_metadata']} ep_opts={d['ep_options']}"
            )
        for name, status, detail in r["cases"]:
            row("3", name, status, detail)
    step4()
    print(f"\nresults ({time.perf_counter() - t:.1f} s):")
    w = max(len(c) for _, c, _, _ in ROWS)
    print(f"{'step':<4} | {'case':<{w}} | {'status':<13} | detail")
    print("-" * (w + 40))
    for step, case, status, detail in ROWS:
        print(f"{step:<4} | {case:<{w}} | {status:<13} | {detail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
