"""ONNX Runtime plugin execution providers: discovery, doctor, selection, precision, no silent fallback.

The tests that need a real plugin use ``onnxruntime-ep-openvino`` and ``onnxruntime-ep-webgpu`` (``nox -s
plugin_eps`` installs both, pinned by tests/constraints-plugins.txt); without them they skip with the reason.
Discovery without plugins, placeholder and broken packages run everywhere.

OpenVINO's factory offers its CPU device only on Intel CPUs: on an AMD CPU the plugin registers and offers no
device, so the parts that run a model on it skip there with a reason naming the plugin and the CPU, and
:func:`test_openvino_offers_a_device_exactly_on_intel_cpus` fails if an Intel CPU ever gets no device (no skip can
hide a failure there). What does not need a device runs on every machine: registration, doctor's line, the error a
user gets, the fake AMD plugin package found and ordered. The WebGPU plugin offers no device on any machine without
a GPU, so the "registered, but no device" path is checked on every CPU. Packages are "installed" as a
``.dist-info`` folder plus a module on ``PYTHONPATH`` of a fresh interpreter (registration is once per process).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer import verify
from amdinfer._support._hardware import cpu_description, cpu_info
from amdinfer.errors import BackendUnavailableError, OptionError

ROOT = Path(__file__).resolve().parent
FAKE = ROOT / "fake_ep_plugin"
HAVE_OPENVINO = importlib.util.find_spec("onnxruntime_ep_openvino") is not None
HAVE_WEBGPU = importlib.util.find_spec("onnxruntime_ep_webgpu") is not None
CPU = cpu_description()
needs_openvino = pytest.mark.skipif(
    not HAVE_OPENVINO, reason="onnxruntime-ep-openvino is not installed (the plugin_eps nox session installs it)"
)


def _offers_device(ep: str) -> bool:
    import onnxruntime as ort

    from amdinfer.engines.ort._plugins import register_plugins

    register_plugins(ort)
    return any(d.ep_name == ep for d in ort.get_ep_devices())


OPENVINO_DEVICE = HAVE_OPENVINO and _offers_device("OpenVINOExecutionProvider")
needs_openvino_device = pytest.mark.skipif(
    not OPENVINO_DEVICE,
    reason=(
        f"onnxruntime-ep-openvino offers no device on this CPU ({CPU}): its factory serves Intel CPUs, GPUs and "
        "NPUs; this part runs on an Intel machine (test_openvino_offers_a_device_exactly_on_intel_cpus holds it to "
        "that)"
    )
    if HAVE_OPENVINO
    else "onnxruntime-ep-openvino is not installed (the plugin_eps nox session installs it)",
)


def _dist(site: Path, name: str, version: str, module: str | None = None) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if module:
        (info / "top_level.txt").write_text(module + "\n")


def _python(code: str, site: Path | None = None, **env: str) -> dict:
    path = os.pathsep.join(filter(None, [str(site) if site else "", os.environ.get("PYTHONPATH", "")]))
    full = {**os.environ, "PYTHONPATH": path, **env}
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_DOCTOR = "import json; from amdinfer.doctor import diagnose; r = diagnose(); print(json.dumps(r.to_dict()))"


def _matmul(seed: int = 0) -> tuple[bytes, np.ndarray, np.ndarray]:
    """float32 MatMul 8x64 . 64x64 and its input and weight."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), x, w


# ------------------------------------------------------------------ everywhere (no plugin needed)
@pytest.mark.skipif(HAVE_OPENVINO, reason="a plugin EP package is installed here")
def test_doctor_says_no_plugin_was_found() -> None:
    report = _python(_DOCTOR)
    assert report["ep_plugins"] == {
        "plugin EPs": "none found (no onnxruntime-ep-* package installed, $AMDINFER_EP_LIBRARIES not set)"
    }


def test_placeholder_package_is_reported_as_such(tmp_path: Path) -> None:
    _dist(tmp_path, "onnxruntime-ep-rocm", "0.0.0")  # what PyPI serves today: metadata, no module, no library
    report = _python(_DOCTOR, tmp_path)
    line = report["ep_plugins"]["onnxruntime-ep-rocm"]
    assert (
        line
        == "onnxruntime-ep-rocm 0.0.0: placeholder package without a plugin library (the EP has not been released yet)"
    )


def test_a_plugin_that_fails_to_load_is_a_diagnosis_and_an_error_when_asked_for(tmp_path: Path) -> None:
    module = tmp_path / "onnxruntime_ep_broken"
    module.mkdir()
    (tmp_path / "libbroken.so").write_bytes(b"not an ELF file")
    (module / "__init__.py").write_text(
        f"def get_library_path():\n    return {str(tmp_path / 'libbroken.so')!r}\n"
        "def get_ep_names():\n    return ['BrokenExecutionProvider']\n"
    )
    _dist(tmp_path, "onnxruntime-ep-broken", "1.0.0", "onnxruntime_ep_broken")
    code = (
        "import json, amdinfer\nfrom amdinfer.doctor import diagnose\nfrom amdinfer.testing.models import tiny_cnn\n"
        "r = diagnose()\n"
        "try:\n    amdinfer.load(tiny_cnn(), providers=['broken']); err = None\n"
        "except amdinfer.BackendUnavailableError as exc:\n    err = str(exc)\n"
        "print(json.dumps({'line': r.ep_plugins['onnxruntime-ep-broken'], 'problems': r.problems, 'err': err}))\n"
    )
    out = _python(code, tmp_path)
    assert out["line"].startswith("onnxruntime-ep-broken 1.0.0: failed: ")
    assert "libbroken.so" in out["line"]
    assert any(p.startswith("plugin EP onnxruntime-ep-broken cannot be used: ") for p in out["problems"])
    assert out["err"] is not None and "BrokenExecutionProvider" in out["err"] and "libbroken.so" in out["err"]


def test_ep_library_must_be_an_existing_file(tmp_path: Path) -> None:
    from amdinfer.testing.models import tiny_cnn

    with pytest.raises(OptionError, match=r"ep_library: '.*nope\.so' is not a file; expected the path"):
        amdinfer.load(tiny_cnn(), backend="ort", ep_library=tmp_path / "nope.so")


def test_auto_order_without_plugins_is_the_built_in_order() -> None:
    from amdinfer.engines.ort._plugins import auto_provider_order
    from amdinfer.engines.ort._providers import PROVIDER_ORDER

    assert auto_provider_order(["CPUExecutionProvider"]) == list(PROVIDER_ORDER)


def test_openvino_record_keeps_float32_and_a_raw_override_is_said() -> None:
    from amdinfer.engines.ort import provider_options
    from amdinfer.engines.ort._plugins import precision_note

    config = json.loads(provider_options("OpenVINOExecutionProvider")["load_config"])
    assert config == {"CPU": {"INFERENCE_PRECISION_HINT": "f32"}, "GPU": {"INFERENCE_PRECISION_HINT": "f32"}}
    notes: list[str] = []
    precision_note("OpenVINOExecutionProvider", {"load_config": '{"CPU": {"INFERENCE_PRECISION_HINT": "bf16"}}'}, notes)
    assert len(notes) == 1 and "replace amdinfer's float32 setting" in notes[0]


# ------------------------------------------------------------------ with the OpenVINO plugin
@needs_openvino
def test_openvino_offers_a_device_exactly_on_intel_cpus() -> None:
    report = _python(_DOCTOR)
    line = report["ep_plugins"]["onnxruntime-ep-openvino"]
    if cpu_info()["vendor"] == "GenuineIntel":
        assert OPENVINO_DEVICE, f"an Intel CPU ({CPU}) got no OpenVINO device: {line}"
        return
    assert not OPENVINO_DEVICE, f"OpenVINO offers a device on {CPU}; its device-bound tests run here, update the docs"
    assert line.startswith(
        "onnxruntime-ep-openvino 1.8.1: registered, but OpenVINOExecutionProvider offers no device on this machine "
        f"({CPU}); ONNX Runtime lists only: CPUExecutionProvider on CPU ("
    )
    assert any(
        p.startswith("plugin EP onnxruntime-ep-openvino offers no device on this machine") for p in report["problems"]
    )


@needs_openvino
def test_a_plugin_without_a_device_here_is_said_so_not_not_installed() -> None:
    from amdinfer.testing.models import tiny_cnn

    ep, package = (
        ("WebGpuExecutionProvider", "onnxruntime-ep-webgpu 0.4.0")
        if HAVE_WEBGPU and not _offers_device("WebGpuExecutionProvider")
        else ("OpenVINOExecutionProvider", "onnxruntime-ep-openvino 1.8.1")
    )
    if ep == "OpenVINOExecutionProvider" and OPENVINO_DEVICE:
        pytest.skip(f"every installed plugin offers a device on this machine ({CPU})")
    with pytest.raises(BackendUnavailableError) as caught:
        amdinfer.load(tiny_cnn(), providers=[ep])
    said = str(caught.value)
    assert said.startswith(
        f"provider {ep!r}: its plugin {package} is installed and registered, but offers no device on this machine "
        f"({CPU})"
    )
    assert "ONNX Runtime lists only ['CPUExecutionProvider on CPU (" in said
    assert "pip install" not in said and "not in this onnxruntime build" not in said
    with amdinfer.load(tiny_cnn()) as engine:  # auto: passed over, with the same reason
        assert engine.info.skipped[ep] == said


@needs_openvino_device
def test_doctor_lists_openvino_with_its_devices() -> None:
    report = _python(_DOCTOR)
    line = report["ep_plugins"]["onnxruntime-ep-openvino"]
    assert line.startswith("onnxruntime-ep-openvino 1.8.1: registered; OpenVINOExecutionProvider on CPU (")


@needs_openvino_device
def test_fp32_matmul_on_openvino_is_float32() -> None:
    model, x, w = _matmul()
    with amdinfer.load(model, providers=["openvino"]) as engine:
        y = engine.run({"x": x})["y"]
        info = engine.info
    assert info.providers[0] == "OpenVINOExecutionProvider" and info.device == "openvino:0"
    assert info.settings["plugin_ep"]["nodes"] == {"OpenVINOExecutionProvider": 1}
    truth = x.astype(np.float64) @ w.astype(np.float64)
    # float32 accumulation over 64 products: |err| <= 64 * eps32 * sum|x||w| (bf16 would be ~1e-2 relative)
    bound = 64 * np.finfo(np.float32).eps * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64))
    assert np.all(np.abs(y - truth) <= bound)
    verify.compare({"y": y}, {"y": truth.astype(np.float32)}, precision="fp32").assert_passed()


def _bf16_capable() -> bool:
    import onnxruntime as ort

    from amdinfer.engines.ort._plugins import register_plugins

    register_plugins(ort)
    caps = [d.ep_metadata.get("OPTIMIZATION_CAPABILITIES", "") for d in ort.get_ep_devices()]
    return any("BF16" in c.split() for c in caps)


@needs_openvino_device
def test_a_precision_drop_is_said_in_notes_and_flagged_by_verify() -> None:
    if not _bf16_capable():
        pytest.skip("this CPU has no bf16 units: OpenVINO keeps float32 whatever the hint")
    model, x, w = _matmul()
    lowered = ("openvino", {"load_config": json.dumps({"CPU": {"INFERENCE_PRECISION_HINT": "bf16"}})})
    with amdinfer.load(model, providers=[lowered]) as engine:
        y = engine.run({"x": x})["y"]
        notes = engine.info.notes
    assert any("may be below float32 precision" in n for n in notes)
    report = verify.compare({"y": y}, {"y": x @ w}, precision="fp32")
    assert not report.passed


@needs_openvino_device
def test_a_requested_plugin_ep_that_takes_no_node_is_an_error() -> None:
    graph = helper.make_graph(
        [helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)],
        "binarizer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    with pytest.raises(BackendUnavailableError, match=r"'OpenVINOExecutionProvider' was requested but took no node"):
        amdinfer.load(model, providers=["openvino"])


@needs_openvino_device
def test_resnet50_on_openvino_matches_the_reference() -> None:
    from amdinfer.testing.models import resnet50

    model = resnet50(seed=0)
    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    with amdinfer.load(model, providers=["openvino"]) as engine:
        got = engine.run({"input": image})
        assert engine.info.providers[0] == "OpenVINOExecutionProvider"
        assert sum(engine.info.settings["plugin_ep"]["nodes"].values()) > 100
    with amdinfer.load(model, backend="reference") as oracle:
        verify.compare(got, oracle.run({"input": image}), precision="fp32").assert_passed()


@needs_openvino
def test_registration_is_once_per_process_and_thread_safe() -> None:
    code = (
        "import json, threading, onnxruntime as ort\n"
        "from amdinfer.engines.ort._plugins import register_plugins\n"
        "calls = []\n"
        "real = ort.register_execution_provider_library\n"
        "ort.register_execution_provider_library = lambda *a: (calls.append(a[0]), real(*a))\n"
        "out = []\n"
        "ts = [threading.Thread(target=lambda: out.append(register_plugins(ort))) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "eps = [d.ep_name for d in ort.get_ep_devices()]\n"
        "print(json.dumps({'same': all(o == out[0] for o in out), 'states': [p.state for p in out[0]],\n"
        "                  'calls': sorted(calls), 'ov': eps.count('OpenVINOExecutionProvider')}))\n"
    )
    out = _python(code, AMDINFER_EP_PLUGINS="onnxruntime-ep-openvino")
    state = "registered" if OPENVINO_DEVICE else "no device"
    assert (out["same"], out["states"][0], out["ov"]) == (True, state, int(OPENVINO_DEVICE))
    assert len(out["calls"]) == 1  # one registration for eight racing callers


@needs_openvino_device
def test_explicit_ep_library_when_packages_are_left_out() -> None:
    code = (
        "import json, amdinfer, onnxruntime_ep_openvino as ov\n"
        "from amdinfer.testing.models import tiny_cnn\n"
        "e = amdinfer.load(tiny_cnn(), providers=['OpenVINOExecutionProvider'], ep_library=ov.get_library_path())\n"
        "print(json.dumps({'providers': e.info.providers, 'package': e.info.settings['plugin_ep']['package']}))\n"
    )
    out = _python(code, AMDINFER_EP_PLUGINS="none")
    assert out == {"providers": ["OpenVINOExecutionProvider", "CPUExecutionProvider"], "package": "ep_library="}


@needs_openvino
def test_an_amd_plugin_with_the_documented_layout_is_found_ordered_and_run(tmp_path: Path) -> None:
    _dist(tmp_path, "onnxruntime-ep-amdgpu-fake", "0.1.0", "onnxruntime_ep_amdgpu_fake")
    site = Path(os.pathsep.join([str(tmp_path), str(FAKE)]))
    code = (
        "import json, numpy as np, amdinfer\nfrom amdinfer.doctor import diagnose\n"
        "from amdinfer.engines.ort._plugins import auto_provider_order\n"
        "from amdinfer.testing.models import tiny_cnn, random_inputs\n"
        "e = amdinfer.load(tiny_cnn())\n"  # backend='auto'
        "ref = amdinfer.load(tiny_cnn(), backend='reference')\n"
        "x = random_inputs(tiny_cnn(), batch=2, seed=0)\n"
        "err = float(np.abs(e.run(x)['logits'] - ref.run(x)['logits']).max())\n"
        "plugin = e.info.settings.get('plugin_ep', {}).get('package')\n"
        "order = auto_provider_order(['OpenVINOExecutionProvider', 'CUDAExecutionProvider', 'CPUExecutionProvider'])\n"
        "print(json.dumps({'doctor': diagnose().ep_plugins, 'providers': e.info.providers, 'order': order,\n"
        "                  'skipped': e.info.skipped, 'package': plugin, 'err': err}))\n"
    )
    out = _python(code, site, AMDINFER_EP_PLUGINS="onnxruntime-ep-amdgpu-fake")
    assert out["doctor"]["onnxruntime-ep-openvino"] == (
        "onnxruntime-ep-openvino 1.8.1: installed, not registered ($AMDINFER_EP_PLUGINS leaves it out)"
    )
    assert out["err"] < 1e-4
    line = out["doctor"]["onnxruntime-ep-amdgpu-fake"]
    if OPENVINO_DEVICE:
        assert line.startswith("onnxruntime-ep-amdgpu-fake 0.1.0: registered; OpenVINOExecutionProvider on CPU (")
        assert out["providers"][0] == "OpenVINOExecutionProvider" and out["package"] == "onnxruntime-ep-amdgpu-fake"
        # an AMD plugin EP goes before the CUDA EP in the auto order (found by its package name, not its EP's)
        assert out["order"].index("OpenVINOExecutionProvider") < out["order"].index("CUDAExecutionProvider")
    else:
        # found and registered without knowing its name; no device here, so auto passes it over and says why
        assert line.startswith("onnxruntime-ep-amdgpu-fake 0.1.0: registered, but OpenVINOExecutionProvider offers no")
        assert out["providers"] == ["CPUExecutionProvider"] and out["package"] is None
        assert out["skipped"]["OpenVINOExecutionProvider"].startswith(
            "provider 'OpenVINOExecutionProvider': its plugin onnxruntime-ep-amdgpu-fake 0.1.0 is installed and "
            "registered, but offers no device on this machine"
        )


@needs_openvino
def test_the_plugin_has_a_conformance_kind() -> None:
    from amdinfer.testing import conformance

    kind = conformance.ENGINE_KINDS["ort-openvino"]
    assert kind.options == {"backend": "ort", "providers": ["OpenVINOExecutionProvider"], "threads": 1}
    why = conformance.availability("ort-openvino")
    if OPENVINO_DEVICE:
        assert why is None
    else:  # the contract and node suites skip with this reason: the plugin, the CPU, and why
        assert why is not None
        assert "onnxruntime-ep-openvino 1.8.1 is installed and registered, but offers no device" in why
        assert CPU in why


def test_a_known_plugin_that_is_not_installed_says_what_to_install() -> None:
    if HAVE_OPENVINO:
        pytest.skip("onnxruntime-ep-openvino is installed here")
    from amdinfer.testing.models import tiny_cnn

    with pytest.raises(BackendUnavailableError) as caught:
        amdinfer.load(tiny_cnn(), providers=["openvino"])
    assert str(caught.value).startswith(
        "provider 'OpenVINOExecutionProvider' is a plugin EP and its package onnxruntime-ep-openvino is not installed"
    )
    assert "`pip install onnxruntime-ep-openvino`" in str(caught.value)
