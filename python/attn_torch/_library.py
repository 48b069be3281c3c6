"""Finding and loading libattn.so, the library that registers the torch.ops.attn operators."""
import mmap
import os
import struct
from pathlib import Path

import torch

if int(torch.__version__.split(".")[0]) < 2:
    # ops.py's signatures and the operators' Python registrations (torch.library, SymInt) are PyTorch 2's.
    raise ImportError(f"attn_torch needs PyTorch 2.x; this is torch {torch.__version__} at "
                      f"{os.path.dirname(torch.__file__)}. The C++ library works with LibTorch 1.13 too; "
                      f"the Python package is built and tested in the 2.x lane (docs/python.md)")

#: The environment variable that names a libattn.so to load instead of the package's own copy.
LIBRARY_ENV = "ATTN_LIBRARY"

_loaded_path = None


def _bundled_candidates():
    """Where `pip install` puts the package's libattn.so (attn_torch/lib/, or lib64/)."""
    here = Path(__file__).resolve().parent
    return (here / "lib" / "libattn.so", here / "lib64" / "libattn.so")


def _bundled_library():
    """The libattn.so that `pip install` put into the package, or None."""
    for candidate in _bundled_candidates():
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
        looked = " or ".join(str(c) for c in _bundled_candidates())
        raise ImportError(
            f"attn_torch: no libattn.so to load: {LIBRARY_ENV} is not set and the package has none at {looked}. "
            "Either install the package with its library (pip install --no-build-isolation . in attn's "
            f"checkout, docs/python.md), or set {LIBRARY_ENV}=/path/to/libattn.so to use a library built with CMake")
    return bundled


def _dynamic_strings(path):
    """The DT_NEEDED names and the DT_SONAME (or None) of the ELF shared library at `path`; ([], None) where it is
    not a readable 64-bit little-endian ELF file with a dynamic section (then the loader's own error speaks)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
                return [], None
            shoff, = struct.unpack_from("<Q", data, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
            sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
            needed, soname = [], None
            for _, kind, _, _, offset, size, link, _, _, entsize in sections:
                if kind != 6:  # SHT_DYNAMIC; its sh_link is the string table's section
                    continue
                strings = sections[link][4]
                for at in range(offset, offset + size, entsize or 16):
                    tag, value = struct.unpack_from("<qQ", data, at)
                    if tag in (1, 14):  # DT_NEEDED, DT_SONAME
                        start = strings + value
                        end = data.find(b"\0", start)
                        if end < 0:
                            raise ValueError("an unterminated string")
                        name = data[start:end].decode()
                        if tag == 1:
                            needed.append(name)
                        else:
                            soname = name
            return needed, soname
    except (OSError, ValueError, IndexError, OverflowError, struct.error):  # UnicodeDecodeError: a ValueError
        return [], None


def _loaded_c10():
    """The path of the libc10 that this process's torch mapped, or None (no /proc, or not found)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libc10.so"):
                    return path
    except OSError:
        pass
    return None


def _check_same_torch(path):
    """Refuses a libattn.so linked against another torch's libc10 than the one in this process. The dynamic linker
    would load that second torch beside the first (Debian's libc10.so.1.13 and a wheel's libc10.so have different
    names), and two torches in one process abort or crash before any Python error can be raised."""
    c10 = _loaded_c10()
    if c10 is None:
        return
    ours = _dynamic_strings(c10)[1] or os.path.basename(c10)
    wanted = [name for name in _dynamic_strings(path)[0] if name.startswith("libc10.so")]
    if wanted and ours not in wanted:
        raise ImportError(
            f"attn_torch: {path} was built against another torch: it needs {wanted[0]}, where this torch "
            f"({torch.__version__} at {os.path.dirname(torch.__file__)}) is {ours} ({c10}). Loading it would put two "
            f"torches in one process. Use the library built for this torch, or rebuild it (docs/python.md)")


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
    _check_same_torch(path)
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
