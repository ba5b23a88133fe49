"""torch's named results (``torch.return_types``): tuples whose items are also attributes.

``vals, idx = x.max(dim=0)`` unpacks them, ``x.max(0).values`` and ``x.max(0)[0]`` read the values, and
each prints as torch's does, with daskgrad's module name.
"""
from __future__ import annotations

import collections


def _result(name, fields):
    base = collections.namedtuple(name, fields)

    def __repr__(self):
        items = ",\n".join(f"{f}={v!r}" for f, v in zip(self._fields, self))
        return f"daskgrad.return_types.{name}(\n{items})"

    return type(name, (base,), {"__slots__": (), "__repr__": __repr__, "__module__": __name__,
                                "__doc__": f"torch's ``torch.return_types.{name}``: ({', '.join(fields)})."})


max, min, median, nanmedian, sort, topk, kthvalue = (
    _result(name, ["values", "indices"]) for name in ("max", "min", "median", "nanmedian", "sort", "topk", "kthvalue"))
cummax, cummin, mode = (_result(name, ["values", "indices"]) for name in ("cummax", "cummin", "mode"))
aminmax = _result("aminmax", ["min", "max"])
frexp = _result("frexp", ["mantissa", "exponent"])
histogram = _result("histogram", ["hist", "bin_edges"])
triangular_solve = _result("triangular_solve", ["solution", "cloned_coefficient"])
qr = _result("qr", ["Q", "R"])
svd = _result("svd", ["U", "S", "V"])
geqrf = _result("geqrf", ["a", "tau"])

__all__ = ["aminmax", "cummax", "cummin", "frexp", "geqrf", "histogram", "kthvalue", "max", "median", "min", "mode",
           "nanmedian", "qr", "sort", "svd", "topk", "triangular_solve"]
