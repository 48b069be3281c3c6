"""attn's fused attention operators for PyTorch, and an attention function for transformers.

Importing the package loads libattn.so (the copy installed with the package, or the one that the environment
variable ATTN_LIBRARY names), which registers the operators torch.ops.attn.flash_attention,
torch.ops.attn.decode_attention and torch.ops.attn.linear_rows in PyTorch's dispatcher. The functions below
are thin, documented wrappers over them; attn_torch.transformers registers attn with transformers'
AttentionInterface. docs/python.md in attn's repository is the guide.
"""
from ._library import LIBRARY_ENV, library_path, load_library

load_library()

from .ops import decode_attention, flash_attention, linear_rows  # noqa: E402  (needs the library loaded)

try:
    from importlib.metadata import PackageNotFoundError, version as _version
    try:
        __version__ = _version("attn-torch")
    except PackageNotFoundError:  # imported from a checkout, not installed
        __version__ = "0+checkout"
except ImportError:  # pragma: no cover
    __version__ = "unknown"

__all__ = ["flash_attention", "decode_attention", "linear_rows", "library_path", "load_library", "LIBRARY_ENV"]
