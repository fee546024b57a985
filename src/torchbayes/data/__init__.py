"""Real data sets. Loaders return tensors; see each function for where the data comes from."""

from ._files import data_root, fetch
from .digits import load_digits
from .mushroom import Mushroom, load_mushroom

__all__ = ["Mushroom", "data_root", "fetch", "load_digits", "load_mushroom"]
