"""Read a Megatron pair with Megatron-LM's own reader and print it as JSON.

Run with the venv's Python, where megatron-core is installed (scripts/deps):
    python megatron_read.py PREFIX
prints {"dtype": NAME, "sequences": N, "document_indices": [...], "documents": [[ids]...]}.
Exits 77 when megatron-core is not importable.
"""
import json
import logging
import sys
import warnings

warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
try:
    from megatron.core.datasets.indexed_dataset import IndexedDataset
except ImportError as exc:
    print(f"megatron-core not importable: {exc}", file=sys.stderr)
    sys.exit(77)

ds = IndexedDataset(sys.argv[1], multimodal=False, mmap=True)
docs = [ds.get(i).tolist() for i in range(len(ds))]
json.dump({"dtype": ds.index.dtype.__name__, "sequences": len(ds),
           "document_indices": ds.document_indices.tolist(), "documents": docs}, sys.stdout)
