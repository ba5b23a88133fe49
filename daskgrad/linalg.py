"""``daskgrad.linalg``: the names torch users look for under ``torch.linalg`` (NumPy's ``axis`` and
``keepdims`` where they take axes).  The ops and their VJP rules live in :mod:`daskgrad.ops.linalg`,
whose docstring says which matrices are decomposed chunk by chunk (TSQR) and which must fit in one
chunk."""
from .ops.linalg import (cholesky, det, diagonal, eigh, eigvalsh, inv, lstsq, matmul, matrix_norm, matrix_power,
                         norm, pinv, qr, slogdet, solve, svd, svdvals, vector_norm)
from .ops.linalg import (EighResult, LstsqResult, QRResult, SlogdetResult, SVDResult)  # noqa: F401  (result types)

__all__ = ["cholesky", "det", "diagonal", "eigh", "eigvalsh", "inv", "lstsq", "matmul", "matrix_norm",
           "matrix_power", "norm", "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "vector_norm"]
