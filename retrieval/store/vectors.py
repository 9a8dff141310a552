"""pgvector values read back as float32 numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np


def as_array(vector: Any) -> np.ndarray:
    """A pgvector value (pgvector.Vector or sequence) as a float32 numpy array."""
    if hasattr(vector, "to_numpy"):
        vector = vector.to_numpy()
    return np.asarray(vector, dtype=np.float32)
