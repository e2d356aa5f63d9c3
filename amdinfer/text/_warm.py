"""The OCR cascade's shapes warmed at load (:func:`~amdinfer.text.ocr`'s ``warm``): a cold start in seconds.

With ``shape_buckets`` the cascade's engines meet few input shapes, all known before the first page: the detector's
canvases (pages through :class:`~amdinfer.text.PageFit` and :class:`~amdinfer.text.DetResize`, padded to
multiples of 256), the classifier's one ``(batch_size, 3, 48, 192)`` and the recogniser's widths in 160-wide
steps. On the CUDA EP each shape has a session of its own (``shape_sessions``), and its first run chooses the
convolutions' kernels; :func:`warm_cascade` builds and runs them all at load (:meth:`OrtEngine.warm
<amdinfer.engines.ort.OrtEngine.warm>`, the three engines at once), so that the first pass over a folder of pages
runs at the warm rate.

The rule (``warm="auto"``): on when the shapes are bucketed (``shape_buckets``, on a GPU by default) and the
detector's engine is not on the CPU. On the CPU one session serves every shape at no cost per new shape, while a
warm run of each canvas would cost seconds of compute, so it stays off there (``warm=True`` forces it).

Example:
    >>> shapes = ocr_warm_shapes(batch_size=6, pages=[(1100, 850)], max_rec_width=640)
    >>> shapes["det"], shapes["cls"], shapes["rec"]
    ([(1, 3, 1280, 1024)], [(6, 3, 48, 192)], [(6, 3, 48, 320), (6, 3, 48, 480), (6, 3, 48, 640)])
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import OptionError
from ._det import DetResize, PageFit

__all__ = ["REC_WARM_MAX_WIDTH", "WARM_PAGES", "check_warm", "ocr_warm_shapes", "warm_cascade"]

log = logging.getLogger("amdinfer.text")

#: Page sizes ``(height, width)`` whose detector canvases ``warm`` builds by default: US letter and A4 at 72-300
#: dpi (portrait and landscape), camera and screen frames both ways; 13 canvases with PP-OCR's defaults.
WARM_PAGES: tuple[tuple[int, int], ...] = (
    (842, 595), (1100, 850), (1650, 1275), (1754, 1240), (2200, 1700), (2339, 1654), (3300, 2550), (3508, 2480),
    (850, 1100), (1275, 1650), (1240, 1754), (400, 640), (480, 640), (640, 480), (720, 1280), (1080, 1920),
    (1920, 1080), (3024, 4032), (4032, 3024),
)  # fmt: skip

#: The widest recogniser batch ``warm`` builds (a line batch about 40:1); wider ones get a session on first use.
REC_WARM_MAX_WIDTH = 1920


def check_warm(value: Any) -> bool | str | tuple[tuple[int, int], ...]:
    """``ocr(warm=)``: ``"auto"``, ``True``, ``False`` or page sizes ``[(height, width), ...]`` (on, with those
    pages' detector canvases instead of :data:`WARM_PAGES`').

    Example:
        >>> check_warm([(100, 200)]), check_warm("auto")
        (((100, 200),), 'auto')
        >>> check_warm([(0, 5)])
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: warm: got the page size (0, 5), expected (height, width), ints >= 1
    """
    if isinstance(value, bool) or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise OptionError(f"warm: got {value!r}, expected 'auto', True, False or a list of page sizes (height, width)")
    out = []
    for size in value:
        ok = isinstance(size, Sequence) and len(size) == 2
        ok = ok and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in size)
        if not ok:
            shown = tuple(size) if isinstance(size, Sequence) and not isinstance(size, str) else size
            raise OptionError(f"warm: got the page size {shown!r}, expected (height, width), ints >= 1")
        out.append((int(size[0]), int(size[1])))
    return tuple(out)


def ocr_warm_shapes(
    *,
    batch_size: int = 6,
    pages: Sequence[tuple[int, int]] = WARM_PAGES,
    det_limit: int = 736,
    det_limit_type: str = "min",
    page_fit: bool = True,
    det_multiple: int = 256,
    rec_height: int = 48,
    rec_width: int = 320,
    rec_width_step: int = 160,
    cls_width: int = 192,
    max_rec_width: int = REC_WARM_MAX_WIDTH,
) -> dict[str, list[tuple[int, ...]]]:
    """The input shapes of the bucketed cascade: ``{"det": [...], "cls": [...], "rec": [...]}``, each once.

    ``det``: each page size through :class:`~amdinfer.text.PageFit` (when ``page_fit``) and
    :class:`~amdinfer.text.DetResize`, padded to multiples of ``det_multiple`` (:class:`~amdinfer.text.DetPad`);
    ``cls``: ``(batch_size, 3, rec_height, cls_width)``; ``rec``: ``(batch_size, 3, rec_height, w)`` for the
    widths a line batch pads to (:class:`~amdinfer.text.TextResize`: ``rec_width`` rounded up to
    ``rec_width_step``, then each step up to ``max_rec_width``).

    Example:
        >>> ocr_warm_shapes(pages=[(400, 640), (60, 1200)])["det"]  # a page, and a strip padded by PageFit
        [(1, 3, 768, 1280), (1, 3, 768, 3072)]
    """
    fit, resize = PageFit(), DetResize(det_limit, det_limit_type)
    det: list[tuple[int, ...]] = []
    for h, w in pages:
        if page_fit:
            fh, w, top = fit.fit(h, w)
            h = fh + 2 * top
        th, tw = resize.target(h, w)
        shape = (1, 3, -(-th // det_multiple) * det_multiple, -(-tw // det_multiple) * det_multiple)
        if th > 0 and tw > 0 and shape not in det:
            det.append(shape)
    step = rec_width_step
    first = -(-max(rec_width, 1) // step) * step
    rec: list[tuple[int, ...]] = [
        (batch_size, 3, rec_height, w) for w in range(first, max(first, max_rec_width) + 1, step)
    ]
    return {"det": det, "cls": [(batch_size, 3, rec_height, cls_width)], "rec": rec}


def warm_cascade(engines: dict[str, Any], shapes: dict[str, list[tuple[int, ...]]]) -> dict[str, Any]:
    """Warm each engine on its shapes (:meth:`OrtEngine.warm <amdinfer.engines.ort.OrtEngine.warm>`), the
    engines at once; an engine without ``warm`` (another backend) is passed over. Returns ``{"seconds": s,
    role: engine's record or None}``, logged on ``amdinfer.text`` (INFO).

    Example:
        >>> warm_cascade({"rec": object()}, {"rec": [(6, 3, 48, 320)]})["rec"] is None
        True
    """
    t0 = time.perf_counter()
    jobs = {role: e for role, e in engines.items() if callable(getattr(e, "warm", None)) and shapes.get(role)}
    with ThreadPoolExecutor(max(1, len(jobs)), thread_name_prefix="amdinfer-ocr-warm") as pool:
        futures = {role: pool.submit(e.warm, shapes[role]) for role, e in jobs.items()}
        done = {role: f.result() for role, f in futures.items()}
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 3)}
    out.update({role: done.get(role) for role in engines})
    counts = ", ".join(f"{role} {len(shapes.get(role, []))}" for role in jobs)
    log.info("ocr: warmed the cascade's shapes (%s) in %.2f s", counts or "none", out["seconds"])
    return out
