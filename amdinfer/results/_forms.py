"""What every result type answers besides its own fields (:class:`ResultForms`): Ultralytics' row form
``summary(normalize, decimals)`` and what is built on it (``to_df()``, ``to_csv()``, ``to_json()``),
``show()`` (a notebook's inline picture, or a desktop window), and ``speed`` (milliseconds per stage).

The rows: one plain dict per entry (a box, a class, a text line, an embedding), numbers rounded to ``decimals``,
a NaN or infinite number ``None``. ``to_df()`` and ``to_csv()`` flatten each row: a nested dict's keys become
columns (``box`` -> ``x1``, ``y1``, ...), a list's items ``<key>_<i>`` (``embedding_0``, ...).

Example:
    >>> from amdinfer.results import Detections
    >>> det = Detections([[10, 20, 50, 80]], [0.91234567], [0], labels=["cat"], image_shape=(100, 200))
    >>> det.summary(decimals=3)
    [{'name': 'cat', 'class': 0, 'confidence': 0.912, 'box': {'x1': 10.0, 'y1': 20.0, 'x2': 50.0, 'y2': 80.0}}]
    >>> print(det.to_csv(normalize=True, decimals=3), end="")
    name,class,confidence,x1,y1,x2,y2
    cat,0,0.912,0.05,0.2,0.25,0.8
    >>> det.speed
    {'preprocess': None, 'inference': None, 'postprocess': None}
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..errors import BackendUnavailableError, OptionError
from . import _draw
from ._base import _dumps

__all__ = ["ORIENTS", "STAGES", "ResultForms", "flatten", "in_notebook", "rounded", "set_speed"]

#: the stages ``speed`` times, in order
STAGES = ("preprocess", "inference", "postprocess")
#: ``to_json(orient=...)``: one dict per entry (``summary()``, the default), or the result's own columns (``to_dict()``)
ORIENTS = ("rows", "columns")


def check_decimals(decimals: Any, what: str) -> int:
    """``decimals=``: an int >= 0, else an :class:`~amdinfer.errors.OptionError` naming ``what``."""
    if not isinstance(decimals, (int, np.integer)) or isinstance(decimals, bool) or decimals < 0:
        raise OptionError(f"{what}: decimals: got {decimals!r}, expected an int >= 0")
    return int(decimals)


def rounded(value: Any, decimals: int) -> float | None:
    """``round(float(value), decimals)``, or ``None`` for a NaN or infinite number (what strict JSON carries).

    Example:
        >>> rounded(np.float32(0.123456), 3), rounded(float("nan"), 3)
        (0.123, None)
    """
    v = float(value)
    return round(v, decimals) if math.isfinite(v) else None


def _round_all(data: Any, decimals: int) -> Any:
    """Every float in ``data`` (lists and dicts of them, as ``to_dict()`` gives) rounded to ``decimals``."""
    if isinstance(data, float):
        return round(data, decimals)
    if isinstance(data, list):
        return [_round_all(v, decimals) for v in data]
    if isinstance(data, dict):
        return {k: _round_all(v, decimals) for k, v in data.items()}
    return data


def flatten(row: Mapping[str, Any]) -> dict[str, Any]:
    """One summary row as flat columns: a nested dict's keys become columns, a list's items ``<key>_<i>``.

    Example:
        >>> flatten({"name": "cat", "box": {"x1": 1.0, "y1": 2.0}, "embedding": [0.5, 0.25]})
        {'name': 'cat', 'x1': 1.0, 'y1': 2.0, 'embedding_0': 0.5, 'embedding_1': 0.25}
    """
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, Mapping):
            out.update(value)
        elif isinstance(value, list):
            out.update({f"{key}_{i}": v for i, v in enumerate(value)})
        else:
            out[key] = value
    return out


def set_speed(result: Any, speed: Mapping[str, Any]) -> Any:
    """``result`` with its ``speed`` set from ``speed`` (ms per stage of :data:`STAGES`; a missing stage is
    ``None``), when it is a :class:`ResultForms`; anything else (an array) comes back as it is.

    Example:
        >>> from amdinfer.results import Classification
        >>> set_speed(Classification([1], [0.5]), {"inference": 2.5}).speed
        {'preprocess': None, 'inference': 2.5, 'postprocess': None}
    """
    if isinstance(result, ResultForms):
        values = {k: None if speed.get(k) is None else float(speed[k]) for k in STAGES}
        object.__setattr__(result, "_speed", values)  # frozen row records too
    return result


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (IPython's kernel app: Jupyter, VS Code, Colab), where ``show()``
    displays inline; a terminal IPython or plain Python opens a window instead.

    Example:
        >>> in_notebook()
        False
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
    if shell is None:
        return False
    return "IPKernelApp" in getattr(shell, "config", {}) or type(shell).__name__ == "ZMQInteractiveShell"


def _window(image: np.ndarray, title: str) -> None:
    """``image`` (uint8 RGB or grey) in a desktop window: Pillow's image viewer, else an OpenCV window."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise BackendUnavailableError(
            f"{title}.show: no display here (DISPLAY and WAYLAND_DISPLAY are unset), expected a desktop session or "
            "a Jupyter notebook; save(path) writes the picture to a file instead",
            backend="display",
        )
    if _draw._have("PIL"):
        from PIL import Image, ImageShow

        if not ImageShow.show(Image.fromarray(image), title=title):
            raise BackendUnavailableError(
                f"{title}.show: Pillow found no image viewer (xdg-open, display, eog, ...); install one, or "
                "save(path) and open the file",
                backend="display",
            )
        return
    if _draw._have("cv2"):
        import cv2

        try:
            cv2.imshow(title, image[..., ::-1] if image.ndim == 3 else image)
            cv2.waitKey(0)
            cv2.destroyWindow(title)
        except cv2.error as exc:
            raise BackendUnavailableError(
                f"{title}.show: OpenCV cannot open a window (a headless build?): pip install pillow, or save(path)",
                backend="display",
                cause=str(exc),
            ) from exc
        return
    raise BackendUnavailableError(f"{title}.show needs Pillow or OpenCV: pip install pillow", backend="pillow")


class ResultForms:
    """The forms every result type shares; a result class gives its rows (``_summary_rows``), its flat
    ``_columns()`` and, when it is a picture, ``plot()``.

    Example:
        >>> from amdinfer.results import Classification
        >>> Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"]).summary()[0]
        {'name': 'cat', 'class': 3, 'confidence': 0.7}
    """

    __slots__ = ("_speed",)

    #: whether ``show()`` outside a notebook opens ``plot()`` in a window (else it prints the ``repr``)
    _pictured: ClassVar[bool] = True
    #: ``to_json``'s default for ``ensure_ascii`` (``None``: :func:`json.dumps`'s)
    _ensure_ascii: ClassVar[bool | None] = None

    def _summary_rows(self, normalize: bool, decimals: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _columns(self) -> list[str]:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def summary(self, normalize: bool = False, decimals: int = 5) -> list[dict[str, Any]]:
        """One plain dict per entry, Ultralytics' ``Results.summary()`` layout; numbers rounded to ``decimals``,
        a NaN or infinite one ``None``.

        * :class:`Detections`: ``name`` (the label, or the class index as text), ``class``, ``confidence``,
          ``box`` ``{x1, y1, x2, y2}`` (pixels; with ``normalize``, fractions of ``image_shape``'s width and
          height).
        * :class:`Classification`: ``name``, ``class``, ``confidence`` per class of the top-k, best first
          (Ultralytics gives the top-1 only: ``summary()[0]``).
        * :class:`TextLines`: ``text``, ``confidence``, ``box`` ``{x1, y1, ..., x4, y4}`` (the corners, as
          Ultralytics' oriented boxes; ``normalize`` as for detections).
        * :class:`Embeddings` (and one :class:`Embedding`): ``text``, ``embedding`` (the vector as a list; with
          ``normalize``, scaled to unit length).
        * :class:`Matches`: ``query``, ``rank``, ``index``, ``text``, ``score`` per match.

        Raises:
            InputError: ``normalize=True`` on boxes or quads without ``image_shape``.
            OptionError: ``decimals`` is not an int >= 0.

        Example:
            >>> from amdinfer.results import TextLines
            >>> TextLines([[[0, 0], [8, 0], [8, 4], [0, 4]]], ["hi"], [0.98765], image_shape=(8, 16)).summary(
            ...     normalize=True, decimals=2)  # doctest: +NORMALIZE_WHITESPACE
            [{'text': 'hi', 'confidence': 0.99, 'box': {'x1': 0.0, 'y1': 0.0, 'x2': 0.5, 'y2': 0.0,
              'x3': 0.5, 'y3': 0.5, 'x4': 0.0, 'y4': 0.5}}]
        """
        if not isinstance(normalize, bool):
            raise OptionError(f"{type(self).__name__}.summary: normalize: got {normalize!r}, expected True or False")
        return self._summary_rows(normalize, check_decimals(decimals, f"{type(self).__name__}.summary"))

    def to_df(self, normalize: bool = False, decimals: int = 5) -> Any:
        """:meth:`summary` as a pandas ``DataFrame``, one row per entry, flat columns (``box`` -> ``x1``, ...).

        Raises:
            BackendUnavailableError: pandas is not installed (``pip install pandas``; :meth:`to_csv` needs nothing).

        Example:
            >>> from amdinfer.results import Detections
            >>> det = Detections([[0, 0, 4, 2]], [0.5], [1], labels=["dog"])
            >>> if _draw._have("pandas"):
            ...     df = det.to_df()
            ...     print(df.shape, list(df.columns), df["name"].tolist())
            ... else:  # what it prints with pandas installed
            ...     print((1, 7), [*det._columns()], ["dog"])
            (1, 7) ['name', 'class', 'confidence', 'x1', 'y1', 'x2', 'y2'] ['dog']
        """
        if not _draw._have("pandas"):
            raise BackendUnavailableError(
                f"{type(self).__name__}.to_df needs pandas: pip install pandas (to_csv() and summary() need nothing)",
                backend="pandas",
            )
        import pandas as pd

        rows = [flatten(r) for r in self.summary(normalize, decimals)]

        return pd.DataFrame(rows, columns=self._columns())

    def to_csv(self, normalize: bool = False, decimals: int = 5) -> str:
        """:meth:`summary` as CSV text (:mod:`csv`): a header of the flat columns, one line per entry; a
        ``None`` (a NaN or infinite number, a missing text) is an empty cell.

        Example:
            >>> from amdinfer.results import Embeddings
            >>> print(Embeddings([[0.6, 0.8]], ["hi"]).to_csv(decimals=2), end="")
            text,embedding_0,embedding_1
            hi,0.6,0.8
        """
        rows = [flatten(r) for r in self.summary(normalize, decimals)]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self._columns(), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()

    def to_json(
        self, *, orient: str = "rows", normalize: bool = False, decimals: int | None = None, **kwargs: Any
    ) -> str:
        """The result as strict JSON (a NaN or infinite number is ``null``, never ``NaN``/``Infinity``).

        Args:
            orient: ``"rows"`` (the default): :meth:`summary`'s list of one dict per entry, Ultralytics'
                ``Results.to_json()`` (for detections ``name``, ``class``, ``confidence``, ``box``
                ``{x1, y1, x2, y2}``); ``"columns"``: :meth:`to_dict`, the form the constructor reads back
                (``Detections(**json.loads(det.to_json(orient="columns")))``).
            normalize: with ``orient="rows"``, as in :meth:`summary`.
            decimals: round the numbers (``orient="rows"``: default 5, as Ultralytics; ``"columns"``: default
                none).
            **kwargs: go to :func:`json.dumps` (``indent=2``, ...).

        Raises:
            OptionError: an unknown ``orient``, ``normalize=True`` with ``orient="columns"``, a bad ``decimals``.

        Example:
            >>> from amdinfer.results import Detections
            >>> det = Detections([[0, 0, 1, 1]], [0.123456], [3], labels=["cat"])
            >>> det.to_json(decimals=3)
            '[{"name": "cat", "class": 3, "confidence": 0.123, "box": {"x1": 0.0, "y1": 0.0, "x2": 1.0, "y2": 1.0}}]'
            >>> det.to_json(orient="columns", decimals=2)[34:]
            '"scores": [0.12], "classes": [3], "labels": ["cat"], "image_shape": null}'
        """
        what = f"{type(self).__name__}.to_json"
        if not isinstance(orient, str) or orient not in ORIENTS:
            raise OptionError(f"{what}: orient: got {orient!r}, expected one of {list(ORIENTS)}")
        if orient == "rows":
            data: Any = self.summary(normalize, 5 if decimals is None else decimals)
        elif normalize is not False:
            raise OptionError(f"{what}: normalize: got {normalize!r} with orient='columns', expected orient='rows'")
        else:
            data = self.to_dict()
            if decimals is not None:
                data = _round_all(data, check_decimals(decimals, what))
        if self._ensure_ascii is not None:
            kwargs.setdefault("ensure_ascii", self._ensure_ascii)
        return _dumps(data, kwargs)

    @property
    def speed(self) -> dict[str, float | None]:
        """Milliseconds per item in each stage: ``{"preprocess": ms, "inference": ms, "postprocess": ms}``.

        Set by a :class:`~amdinfer.Pipeline` run (``__call__``, ``run_batch``, ``map``; the recipes run
        stage by stage on the CPU): an engine call's time is shared out evenly among its items, as Ultralytics
        does for a batch. A :class:`~amdinfer.pipeline.fuse.FusedPipeline` run sets it too (preprocess: the host
        stages and the placement into the batch buffer; inference: the fused graph's run, shared out; postprocess:
        the split into results, shared out). ``None`` for a stage not timed: a result built by hand.

        Example:
            >>> from amdinfer.results import Classification
            >>> Classification([1], [0.5]).speed
            {'preprocess': None, 'inference': None, 'postprocess': None}
        """
        speed = getattr(self, "_speed", None)
        return dict(speed) if speed is not None else dict.fromkeys(STAGES)

    def show(self) -> None:
        """Show the result: in a Jupyter notebook, displayed inline (the plotted picture when an image is
        kept, else the table); elsewhere, :meth:`plot` in a desktop window (Pillow's image viewer, else
        OpenCV). Results without a picture (embeddings, matches) print their table outside a notebook.

        Raises:
            InputError: outside a notebook, no image is kept (see ``image``).
            BackendUnavailableError: no display (``DISPLAY``/``WAYLAND_DISPLAY`` unset on Linux), no image
                viewer, or neither Pillow nor OpenCV.

        Example:
            >>> from amdinfer.results import Embeddings
            >>> Embeddings([[0.6, 0.8]], ["hi"]).show()
            Embeddings(1 x 2:
              0  [+0.600, +0.800]  'hi'
            )
        """
        if in_notebook():
            from IPython.display import Image, display

            png = getattr(self, "_repr_png_", lambda: None)()
            display(Image(data=png) if png is not None else self)
        elif not self._pictured:
            print(repr(self))
        else:
            _window(self.plot(), type(self).__name__)  # type: ignore[attr-defined]
