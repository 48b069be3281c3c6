"""Finding and loading libattn.so, the library that registers the torch.ops.attn operators."""
import os
from pathlib import Path

import torch

#: The environment variable that names a libattn.so to load instead of the package's own copy.
LIBRARY_ENV = "ATTN_LIBRARY"

_loaded_path = None


def _bundled_library():
    """The libattn.so that `pip install` put into the package (attn_torch/lib/), or None."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "lib" / "libattn.so", here / "lib64" / "libattn.so"):
        if candidate.is_file():
            return candidate
    return None


def library_path():
    """The path of the libattn.so that attn_torch loads (or has loaded).

    ATTN_LIBRARY, when set, names it (a checkout's build, e.g. build-torch-pip/libattn.so); otherwise it is
    the copy installed with the package. Raises ImportError when neither exists.
    """
    if _loaded_path is not None:
        return _loaded_path
    named = os.environ.get(LIBRARY_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ImportError(f"attn_torch: {LIBRARY_ENV}={named} is not a file; point it to a built libattn.so "
                              f"(e.g. build-torch-pip/libattn.so) or unset it to use the installed package's copy")
        return path.resolve()
    bundled = _bundled_library()
    if bundled is None:
        raise ImportError(
            "attn_torch: no libattn.so to load. Either install the package with its library "
            "(pip install --no-build-isolation . in attn's checkout, docs/python.md), or set "
            f"{LIBRARY_ENV}=/path/to/libattn.so to use a library built with CMake")
    return bundled


def _ops_registered():
    try:
        torch.ops.attn.flash_attention
    except (AttributeError, RuntimeError):
        return False
    return True


def load_library():
    """Loads libattn.so into this process once (torch.ops.load_library) and returns its path.

    The operators are registered in PyTorch's dispatcher by the library; a second libattn.so in the same
    process would register them twice, so a call after the first returns the first path.
    """
    global _loaded_path
    if _loaded_path is not None:
        return _loaded_path
    path = library_path()
    if _ops_registered():
        if any(os.path.realpath(p) == os.path.realpath(path) for p in torch.ops.loaded_libraries):
            _loaded_path = path  # the caller loaded this same file with torch.ops.load_library already
            return path
        raise ImportError(f"attn_torch: torch.ops.attn is already registered in this process by another "
                          f"library (loaded: {sorted(torch.ops.loaded_libraries)}); attn_torch would load "
                          f"{path}. Load only one libattn.so per process")
    try:
        torch.ops.load_library(str(path))
    except OSError as error:
        raise ImportError(
            f"attn_torch: cannot load {path}: {error}. A libattn.so loads only into the torch it was built "
            f"against (this is torch {torch.__version__} at {os.path.dirname(torch.__file__)}); rebuild it "
            f"(docs/python.md)") from error
    if not _ops_registered():
        raise ImportError(f"attn_torch: {path} loaded but registered no torch.ops.attn.flash_attention: "
                          f"not attn's library")
    _loaded_path = path
    return path
