"""Assert, after the last pip step of an image build, that the venv holds the cell's pinned versions.

Usage: python assert-pins.py "torch-neuronx==2.13.3.0.* torch==2.13.0+cpu ..." (a trailing .* pins a family).
"""

import fnmatch
import sys
from importlib.metadata import PackageNotFoundError, version

wrong = []
for pin in sys.argv[1].split():
    name, wanted = pin.split("==")
    try:
        found = version(name)
    except PackageNotFoundError:
        found = "missing"
    if not fnmatch.fnmatchcase(found, wanted):
        wrong.append(f"{name} {found} (pinned {wanted})")
if wrong:
    sys.exit("pinned versions not installed: " + ", ".join(wrong))
print("pins installed:", sys.argv[1])
