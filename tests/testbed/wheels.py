"""Build small fixture wheels with real names, versions and dependency metadata.

The wheels are valid (METADATA, WHEEL, RECORD with hashes) and install with pip and uv; each ships one module
that records which fixture it is, so a test can tell a fixture from the real package.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

# A fixed timestamp keeps wheels byte-identical between runs, so their hashes (and the content cache) are stable.
_ZIP_DATE = (2026, 10, 19, 0, 0, 0)


@dataclass(frozen=True)
class FixtureWheel:
    name: str
    version: str
    requires: tuple[str, ...] = ()
    tag: str = "py3-none-any"
    requires_python: str = ""
    module_source: str = ""
    extra_files: dict[str, str] = field(default_factory=dict)

    @property
    def normalized(self) -> str:
        return re.sub(r"[-_.]+", "_", self.name).lower()

    @property
    def filename(self) -> str:
        return f"{self.normalized}-{self.version}-{self.tag}.whl"

    @property
    def import_name(self) -> str:
        return self.normalized


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(wheel: FixtureWheel, out_dir: Path) -> Path:
    """Write the wheel into out_dir and return its path."""
    dist_info = f"{wheel.normalized}-{wheel.version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {wheel.name}",
        f"Version: {wheel.version}",
        "Summary: neuron-torch test fixture (not the real package)",
    ]
    if wheel.requires_python:
        metadata.append(f"Requires-Python: {wheel.requires_python}")
    metadata += [f"Requires-Dist: {req}" for req in wheel.requires]
    source = wheel.module_source or (
        f'"""Fixture of {wheel.name} for neuron-torch tests."""\n'
        f'__version__ = "{wheel.version}"\nNEURON_TORCH_FIXTURE = True\n'
    )
    files: dict[str, bytes] = {f"{wheel.import_name}/__init__.py": source.encode()}
    files.update({path: text.encode() for path, text in wheel.extra_files.items()})
    files[f"{dist_info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    files[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: neuron-torch-testbed\nRoot-Is-Purelib: true\nTag: {wheel.tag}\n"
    ).encode()
    record = [_record_line(path, data) for path, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.filename
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=_ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    target.write_bytes(buffer.getvalue())
    return target
