"""The checks every stage class gets; each stage's test class inherits them (one class per stage, same names)."""

from __future__ import annotations

import pickle

from amdinfer.stages import Stage


class StageContract:
    """Checks every stage class gets: pickling, equality, repr."""

    def stage(self) -> Stage:
        raise NotImplementedError

    def test_pickle_and_repr(self) -> None:
        stage = self.stage()
        copy = pickle.loads(pickle.dumps(stage))
        assert copy == stage
        assert repr(copy) == repr(stage)
        assert repr(stage).startswith(type(stage).__name__ + "(")
