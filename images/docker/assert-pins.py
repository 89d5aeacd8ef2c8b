"""Assert, after the last pip step of an image build, that the venv holds the cell's pinned versions.

Usage: python assert-pins.py "torch-neuronx==2.13.3.0.* torch==2.13.0+cpu ..." (a trailing .* pins a family).
Versions are compared by PEP 440 (`==2.28.7631.0` accepts AWS's `2.28.7631.0+f702b353`) with pins.py, the
standard-library copy of neuron_torch.pins that sits beside this script in the image (smoke_tests/neuron_smoke/pins.py
in the repository), because the venv being checked need not hold `packaging`.
"""

import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

HERE = Path(__file__).resolve().parent
PINS_FILE = next(
    (p for p in (HERE / "pins.py", HERE.parents[1] / "smoke_tests/neuron_smoke/pins.py") if p.is_file()), None
)
if PINS_FILE is None:
    sys.exit(f"assert-pins: pins.py is neither beside {__file__} nor in the repository's smoke_tests/neuron_smoke")
spec = importlib.util.spec_from_file_location("neuron_torch_pins", PINS_FILE)
assert spec is not None and spec.loader is not None
pins = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pins)

wrong = []
for pin in sys.argv[1].split():
    name, wanted = pin.split("==")
    try:
        found = version(name)
    except PackageNotFoundError:
        wrong.append(f"{name} is not installed (pinned {name}=={wanted})")
        continue
    problem = pins.satisfies(name, wanted, found)
    if problem:
        wrong.append(problem)
if wrong:
    sys.exit("pinned versions not installed: " + "; ".join(wrong))
print("pins installed:", sys.argv[1])
