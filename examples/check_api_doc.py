#!/usr/bin/env python3
"""check_api_doc.py SOURCE_DIR - fails when a function declared in
include/ibp/*.h is missing from docs/API.md, so the API map cannot fall behind
the headers (ctest example_api_doc_complete)."""
import glob
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
doc = open(os.path.join(root, "docs", "API.md"), encoding="utf-8").read()
missing = []
for header in sorted(glob.glob(os.path.join(root, "include", "ibp", "*.h"))):
    text = open(header, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # comments name functions too
    text = re.sub(r"#define[^\n]*", "", text)
    for name in dict.fromkeys(re.findall(r"\b(ibp_\w+)\s*\(", text)):
        # `name`, `name(...)` or `name`/`name2`: the whole name, not a prefix of another
        if not re.search(r"`" + name + r"[`(]|\b" + name + r"`", doc):
            missing.append(f"{os.path.basename(header)}: {name}")
if missing:
    print("docs/API.md does not list:\n  " + "\n  ".join(missing))
    sys.exit(1)
print("docs/API.md lists every public function")
