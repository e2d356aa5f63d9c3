"""Test helpers: offline model builders with seeded weights (:mod:`amdinfer.testing.models`).

Example:
    >>> from amdinfer.testing import models
    >>> models.tiny_cnn().graph.output[0].name
    'logits'
"""

from . import models

__all__ = ["models"]
