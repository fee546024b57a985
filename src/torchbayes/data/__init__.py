"""Real data sets. Loaders return tensors; see each function for where the data comes from."""

from .digits import load_digits

__all__ = ["load_digits"]
