"""The OCR cascade's thread settings on the CPU (amdinfer.text._threads): ONNX Runtime's spinning turned off where
the three sessions' workers outnumber the cores, decided by pure functions of fake core and provider counts; the
lines stay RapidOCR's either way."""

from __future__ import annotations

import pytest
from _models import DATA, PAGES, golden, models, needs_models

import amdinfer
from amdinfer.testing.models import tiny_cnn
from amdinfer.text import _threads
from amdinfer.text._threads import cascade_load_options, on_ort_cpu, pools_spin


@pytest.mark.parametrize(
    ("engines", "threads", "cores", "want"),
    [
        (3, 2, 2, False),  # 3 workers + the caller on 2 cores (this VM)
        (2, 2, 2, False),  # no classifier: 2 workers + the caller
        (1, 2, 2, True),  # one session: its worker and the caller, a core each
        (3, 2, 4, True),  # 3 + 1 on 4 cores
        (3, 4, 8, False),  # 9 + 1 on 8
        (3, 4, 16, True),
        (3, None, 16, False),  # ONNX Runtime's default: a thread per core in each pool
        (3, None, 2, False),
        (3, 1, 2, None),  # no workers: nothing to decide
        (3, 2, 1, None),
        (3, 0, 1, None),
    ],
)
def test_pools_spin_counts_workers_against_cores(engines, threads, cores, want):
    assert pools_spin(engines, threads, cores) is want


@pytest.mark.parametrize(
    ("backend", "options", "available", "want"),
    [
        ("auto", {"providers": ["CPUExecutionProvider"]}, ["CUDAExecutionProvider"], True),
        ("ort", {"providers": [("CPUExecutionProvider", {})]}, None, True),
        ("ort", {"providers": "cpu"}, None, True),
        ("ort", {"providers": ["CUDAExecutionProvider", "CPUExecutionProvider"]}, None, False),
        ("ort", {"providers": []}, None, False),
        ("ort", {}, ["CPUExecutionProvider"], True),
        ("ort", {}, ["AzureExecutionProvider", "CPUExecutionProvider"], True),
        ("ort", {}, ["ROCMExecutionProvider", "CPUExecutionProvider"], False),
        ("reference", {}, ["CPUExecutionProvider"], False),
        ("migraphx", {}, ["CPUExecutionProvider"], False),
    ],
)
def test_on_ort_cpu_from_the_options_and_the_installed_providers(backend, options, available, want):
    assert on_ort_cpu(backend, options, ort_providers=available) is want


def test_auto_backend_is_cpu_only_without_migraphx(monkeypatch):
    real = _threads.importlib.util.find_spec
    monkeypatch.setattr(_threads.importlib.util, "find_spec", lambda n: object() if n == "migraphx" else real(n))
    assert on_ort_cpu("auto", {}, ort_providers=["CPUExecutionProvider"]) is False
    monkeypatch.setattr(_threads.importlib.util, "find_spec", lambda n: None if n == "migraphx" else real(n))
    assert on_ort_cpu("auto", {}, ort_providers=["CPUExecutionProvider"]) is True


def test_cascade_load_options_adds_spin_wait_only_where_it_decides():
    cpu = {"providers": ["CPUExecutionProvider"], "threads": 2}
    models3 = ("det.onnx", "rec.onnx", "cls.onnx")
    assert cascade_load_options("ort", cpu, models3, cores=2) == {**cpu, "spin_wait": False}
    assert cascade_load_options("ort", cpu, models3, cores=16) == cpu  # workers fit: ONNX Runtime's default
    assert cascade_load_options("ort", {**cpu, "spin_wait": True}, models3, cores=2)["spin_wait"] is True
    gpu = {"providers": ["CUDAExecutionProvider"], "threads": 2}
    assert cascade_load_options("ort", gpu, models3, cores=2) == gpu
    assert cascade_load_options("reference", cpu, models3, cores=2) == cpu
    with amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]) as engine:  # options do not apply to it
        assert cascade_load_options("ort", {}, (engine, "rec.onnx", None), cores=2) == {}


@pytest.mark.parametrize(("cores", "want"), [(2, False), (64, None)])
def test_the_built_cascade_carries_the_decision(monkeypatch, cores, want):
    monkeypatch.setattr(_threads, "cpu_cores", lambda: cores)
    with amdinfer.ocr(
        tiny_cnn(), tiny_cnn(), tiny_cnn(), charset=["a"], providers=["CPUExecutionProvider"], threads=2
    ) as pipe:
        engines = [pipe.engine, *(p.engine for p in pipe.steps)]
        assert len(engines) == 3
        assert [e.info.options.spin_wait for e in engines] == [want] * 3


@needs_models
def test_lines_are_rapidocrs_with_and_without_spinning():
    m = models()
    assert m is not None
    name = PAGES[0]
    for spin in (True, False):
        with amdinfer.ocr(
            m["det"], m["rec"], m["cls"], providers=["CPUExecutionProvider"], threads=2, spin_wait=spin
        ) as pipe:
            assert [e.info.options.spin_wait for e in (pipe.engine, *(p.engine for p in pipe.steps))] == [spin] * 3
            assert pipe(str(DATA / name)).texts == golden()[name]["texts"]
