"""The paper's four top-label temperature scalings (STS, CSTS, TSwA, CSTSwA) and the binary
ones (bts, btswa).

``calibrator.py`` holds the six calibrators; ``_core.py`` the shared objective, its analytic
derivatives and the bounded Newton solver; ``_tables.py`` the additive loss tables that make
``update`` exact (and their tabulation). docs/temperature.md explains them.
"""

from ._core import BINARY_SCORE_FLOOR
from . import methods
from .methods import (
    BinaryTemperatureScaling,
    BinaryTemperatureScalingWithAwards,
    ClassTemperatureScaling,
    ClassTemperatureScalingWithAwards,
    SharedTemperatureScaling,
    TemperatureScalingWithAwards,
)

__all__ = ["BINARY_SCORE_FLOOR", *methods.__all__]
