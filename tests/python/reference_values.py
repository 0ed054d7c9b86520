"""What the Python tests compare with: the dtypes they run and each rank's
known input. A module of its own, not conftest: braid.torch's tests (torch/)
have a conftest too, and `from conftest import` would find either."""

import numpy as np

# numpy dtypes braid takes as they are; bf16 travels as uint16 with dtype="bf16".
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64]


def rank_values(rank, count, dtype):
    """Rank r's known input: small integers exact in every type (float16 and int8 included)."""
    return ((np.arange(count) % 5) + rank + 1).astype(dtype)
