"""``daskgrad.linalg``: the names torch users look for under ``torch.linalg`` (NumPy's ``axis`` and
``keepdims`` where they take axes, torch's ``dim`` and ``keepdim`` as well), with dask's ``lu``,
``solve_triangular`` (SciPy's ``lower=`` or torch's ``upper=``), ``svd_compressed``, ``tsqr``, ``sfqr``
and the compression helpers.  The ops
and their VJP rules live in :mod:`daskgrad.ops.linalg` (norms, solvers, decompositions),
:mod:`daskgrad.ops.triangular` (``lu``, ``lu_factor``, ``lu_solve`` and the triangular solves),
:mod:`daskgrad.ops.spectral` (``eig``, ``matrix_exp``) and :mod:`daskgrad.ops.products`;
their docstrings say which matrices are decomposed chunk by chunk (TSQR) and which must fit in one
chunk."""
from .chunk import LinAlgError  # noqa: F401  (torch.linalg.LinAlgError: a singular matrix met in a task)
from .ops import _torch_keywords
from .ops.linalg import (cholesky, cond, det, diagonal, eigh, eigvalsh, householder_product, inv, lstsq, matmul,
                         matrix_norm, matrix_power, matrix_rank, norm, pinv, qr, slogdet, solve, svd, svd_compressed,
                         svdvals, tensorinv, tensorsolve, vector_norm)
from .ops.linalg import (EighResult, LstsqResult, QRResult, SlogdetResult, SVDResult)  # noqa: F401  (result types)
from .ops.linalg import compression_level, compression_matrix, sfqr, tsqr
from .ops.products import cross, multi_dot, vecdot
from .ops.spectral import EigResult, eig, eigvals, matrix_exp  # noqa: F401  (EigResult: a type)
from .ops.triangular import LUResult, LUFactorResult, LUFactorExResult  # noqa: F401  (result types)
from .ops.triangular import cholesky_solve, lu, lu_factor, lu_factor_ex, lu_solve, solve_triangular

__all__ = ["cholesky", "cholesky_solve", "compression_level", "compression_matrix", "cond", "cross", "det",
           "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "householder_product", "inv", "lstsq", "lu", "lu_factor",
           "lu_factor_ex",
           "lu_solve", "matmul", "matrix_exp", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm",
           "pinv", "qr", "sfqr", "slogdet", "solve", "solve_triangular", "svd", "svd_compressed", "svdvals",
           "tensorinv", "tensorsolve", "tsqr", "vecdot", "vector_norm"]
globals().update({name: _torch_keywords(globals()[name]) for name in __all__})  # dim= / keepdim= too
