"""Type aliases of the public API's annotations (no run-time behaviour).

The annotations name what a caller may pass; the functions still check values at run time
and fail with a :class:`~topcal.errors.TopcalError` that says what was wrong.
"""

from __future__ import annotations

import os
from typing import Any, Union

from numpy.typing import ArrayLike

__all__ = ["ArrayLike", "MatrixLike", "PathLike"]

#: A file path: a string or a :class:`os.PathLike` (``pathlib.Path``).
PathLike = Union[str, "os.PathLike[str]"]

#: A classifier's input X, as the wrapped scikit-learn classifier takes it (array-like or
#: sparse matrix of shape (n_samples, n_features), a DataFrame, a list of texts for a text
#: pipeline), or its labels y: checked by scikit-learn and the classifier, so any value
#: type-checks here.
MatrixLike = Any
