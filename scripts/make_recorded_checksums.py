"""Write dhp/resources/recorded_files.json: the sha256 and size of every upstream file the recorded-judgment
importers know (LLMBar's result.json files, the WMT22 zh-en metric score files), so an import records the
upstream repository @ commit : path of a file it recognises.

    .venv/bin/python scripts/make_recorded_checksums.py [DATA_ROOT]   # default ../shared/datasets
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from dhp.io import resolve, resource, write_text
from dhp.recorded import IMPORTERS, _files

SOURCES = {
    "llmbar": {"repository": "github.com/princeton-nlp/LLMBar", "commit": "900616bff90b6c6c8e1681f7d079250637c55992",
               "prefix": "Dataset/", "folder": "llmbar_judgments", "licence": "MIT"},
    "mtme": {"repository": "github.com/florethsong/mtme-zh-mwe", "commit": "78ea1631",
             "prefix": "raw_wmt22/metric-scores/zh-en_all/", "folder": "wmt22/metric-scores_zh-en",
             "licence": "Apache-2.0"},
}


def main(root: Path) -> None:
    files = {}
    for kind, src in SOURCES.items():
        folder = root / src["folder"]
        for p in _files(IMPORTERS[kind], folder):
            data = p.read_bytes()
            files[hashlib.sha256(data).hexdigest()] = {"source": kind, "path": IMPORTERS[kind].relative_path(p, folder),
                                                       "bytes": len(data)}
    out = {"sources": {k: {c: v for c, v in s.items() if c != "folder"} for k, s in SOURCES.items()}, "files": files}
    write_text(resource("recorded_files.json"), json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{len(files)} files -> {resource('recorded_files.json')}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else resolve("../shared/datasets"))
