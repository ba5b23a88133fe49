"""``daskgrad.autograd.gradcheck``, the module (``from torch.autograd.gradcheck import GradcheckError``);
the package's attribute of that name is the function, as torch's."""
from ..testing import GradcheckError, gradcheck, gradgradcheck

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]
