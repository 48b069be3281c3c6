"""Writes the reference cases of the scripts that compare attn with transformers (make_transformers_references.py,
make_variant_references.py): one CASE.pt per case, a dict saved with torch.save (the C++ tests read it with
torch::pickle_load, through ReferenceCase), and manifest.txt listing the names in order."""

import os

import torch
import transformers


def write_cases(out, cases, what):
    """Saves every case of `cases` (name -> dict) into the directory `out`, stamped with its name and the
    transformers version, then the manifest; `what` names the cases in the closing line."""
    for name, case in cases.items():
        case["name"] = name
        case["transformers_version"] = transformers.__version__
        torch.save(case, os.path.join(out, name + ".pt"))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(cases) + "\n")
    print(f"wrote {len(cases)} {what} cases from transformers {transformers.__version__} to {out}")
