"""Image build: strip the environment to what the proxy reads at run time.

The proxy never imports litellm (proxy.tokens reads its model map and tiktoken's encodings,
found with importlib.util.find_spec): its client stack (openai, the hub clients, ...) is
never installed (split_requirements.py), and of litellm itself only these files and its
licence are kept. numpy's own test suites go too. Run with the environment's interpreter
after the install; fails if a file the proxy reads is missing.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import sysconfig
from pathlib import Path

# tiktoken names its cache files by the sha1 of each encoding's download URL; litellm ships
# those files, and proxy.tokens.text loads cl100k_base and o200k_base from them.
BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
ENCODINGS = ("cl100k_base", "o200k_base")
MODEL_MAP = "model_prices_and_context_window_backup.json"


def main() -> int:
    site = Path(sysconfig.get_paths()["purelib"])
    package = site / "litellm"
    tokenizers = package / "litellm_core_utils" / "tokenizers"
    keep = {package / MODEL_MAP} | {
        tokenizers / hashlib.sha1(BLOB.format(name).encode()).hexdigest() for name in ENCODINGS
    }
    missing = sorted(str(path) for path in keep if not path.is_file())
    if missing:
        print("litellm's data files are not where the proxy reads them:", *missing, file=sys.stderr)
        return 1
    for info in site.glob("litellm-*.dist-info"):
        for licence in info.glob("licenses/*"):
            shutil.copyfile(licence, package / licence.name)
            keep.add(package / licence.name)
        shutil.rmtree(info)
    for path in sorted(package.rglob("*"), reverse=True):  # files before their folders
        if path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()
        elif path not in keep:
            path.unlink()
    kept = sum(path.stat().st_size for path in keep)
    print(f"litellm: kept {len(keep)} files, {kept / 1e6:.1f} MB")
    for tests in sorted((site / "numpy").rglob("tests")):
        if tests.is_dir():
            shutil.rmtree(tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
