"""``daskgrad.linalg``: the names torch users look for under ``torch.linalg`` (NumPy's ``axis`` and
``keepdims`` where they take axes).  The ops and their VJP rules live in :mod:`daskgrad.ops.linalg`,
whose docstring says which matrices are decomposed chunk by chunk (TSQR) and which must fit in one
chunk."""
from .ops.linalg import diagonal, matmul, matrix_norm, norm, svd, svdvals, vector_norm
from .ops.linalg import SVDResult  # noqa: F401  (the result type)

__all__ = ["diagonal", "matmul", "matrix_norm", "norm", "svd", "svdvals", "vector_norm"]
