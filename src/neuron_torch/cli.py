"""The `neuron-torch` command: a thin layer over the library. Exit codes: 0 ok, 1 a check failed, 2 bad input."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from neuron_torch import __version__
from neuron_torch.build import plan_image_build, run_image_build
from neuron_torch.cellinfo import caveats, cell_record, install_route, relative
from neuron_torch.check import problems
from neuron_torch.errors import EXIT_FAILED, EXIT_OK, NeuronTorchError
from neuron_torch.lock import RESOLVERS, check_routing, lock_cell, seal_lock
from neuron_torch.lockfile import gate_lock, lock_problems, read_lock, seal_command
from neuron_torch.manifest import compare, format_findings, read_manifest, release_packages, vendored_manifest
from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.mirror import ENV_VAR as MIRROR_ENV_VAR
from neuron_torch.mirror import apply_mirror, load_mirror, mirror_from_env
from neuron_torch.packer import ONLY as PACKER_SOURCES
from neuron_torch.packer import build as build_ami
from neuron_torch.render import stale_files, write_rendered

Handler = Callable[[argparse.Namespace, Matrix], int]


def cmd_matrix(args: argparse.Namespace, matrix: Matrix) -> int:
    records = [cell_record(matrix, cell) for cell in matrix.cells]
    if args.json:
        print(json.dumps(records, indent=2))
        return EXIT_OK
    columns = ["id", "torch", "torch_neuronx", "neuronx_cc", "nki", "python_route", "wheels_available"]
    rows = [columns] + [[str(record[c]) for c in columns] for record in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    for row in rows:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip())
    print(f"\n{len(records)} cells of {matrix.release.name}; default {matrix.release.default_cell}")
    return EXIT_OK


def cmd_cell(args: argparse.Namespace, matrix: Matrix) -> int:
    cell = matrix.cell(args.id)
    record = cell_record(matrix, cell)
    if args.json:
        print(json.dumps(record, indent=2))
        return EXIT_OK
    print(f"cell {cell.id} ({matrix.release.name})")
    print("pins:")
    for name, version in cell.pins.items():
        print(f"  {name}=={version}")
    for package in matrix.apt.packages:
        print(f"  apt {package.apt_pin}  ({package.scope})")
    print("install route:")
    for step in install_route(matrix, cell):
        print(f"  {step}")
    notes = caveats(matrix, cell)
    if notes:
        print("caveats:")
        for note in notes:
            print(f"  - {note}")
    lock = (
        "present"
        if cell.lock_path.is_file()
        else with_options(f"missing: run `neuron-torch lock --cell {cell.id}`", args)
    )
    print(f"constraints: {relative(cell.constraints_path, matrix)}\nlock: {relative(cell.lock_path, matrix)} ({lock})")
    return EXIT_OK


def cmd_instance(args: argparse.Namespace, matrix: Matrix) -> int:
    instance = matrix.instance(args.type)
    record = {
        "type": instance.type,
        "family": instance.family,
        "chips": instance.chips or None,
        "expected_devices": instance.expected_devices,
        "lnc": matrix.instance_families[instance.family].lnc_default,
        "note": instance.note,
    }
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        devices = instance.expected_devices or "unknown (not documented)"
        print(f"{instance.type}: family {instance.family}, expected logical devices at LNC={record['lnc']}: {devices}")
        if instance.note:
            print(f"  {instance.note}")
    return EXIT_OK


def cmd_render(args: argparse.Namespace, matrix: Matrix) -> int:
    if args.check:
        stale = stale_files(matrix)
        for path in stale:
            print(f"stale: {relative(path, matrix)}", file=sys.stderr)
        if stale:
            hint = f"{len(stale)} generated file(s) are stale; run `neuron-torch render`"
            print(with_options(hint, args), file=sys.stderr)
            return EXIT_FAILED
        print("all generated files are up to date")
        return EXIT_OK
    changed = write_rendered(matrix)
    for path in changed:
        print(f"wrote {relative(path, matrix)}")
    print(f"{len(changed)} file(s) changed")
    return EXIT_OK


def cmd_lock(args: argparse.Namespace, matrix: Matrix) -> int:
    cells = list(matrix.cells) if args.all else [matrix.cell(args.cell)]
    if args.out and len(cells) > 1:
        raise NeuronTorchError("--out names one file: use it with --cell, not --all")
    index_urls = dict(_parse_index(value) for value in args.index)
    ca_bundle = args.ca_bundle or (args.mirror_settings.ca_bundle if args.mirror_settings else None)
    if args.seal:
        if args.all or args.find_links:
            raise NeuronTorchError("--seal FILE seals one lock: use it with --cell ID, without --all or --find-links")
        path = seal_lock(matrix, cells[0], args.seal, index_urls=index_urls, ca_bundle=ca_bundle, out=args.out)
        print(f"sealed {cells[0].id} -> {relative(path, matrix)} (every hash is a file of its routed index)")
        return EXIT_OK
    for cell in cells:
        if not cell.os.wheels_available:
            print(f"warning: {cell.id}: {cell.os.wheels_note}", file=sys.stderr)
        path = lock_cell(
            matrix,
            cell,
            index_urls=index_urls,
            ca_bundle=ca_bundle,
            find_links=args.find_links,
            out=args.out,
            resolver=args.resolver,
        )
        print(f"locked {cell.id} -> {relative(path, matrix)}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace, matrix: Matrix) -> int:
    if args.lock or args.cell:
        if not (args.lock and args.cell):
            raise NeuronTorchError("check --lock FILE needs --cell ID (the cell the lock is for), and the reverse")
        cell = matrix.cell(args.cell)
        if args.sealed:  # the consumers' gate (the Ansible provisioning runs this)
            gate_lock(matrix, cell, args.lock)
            print(f"{args.lock}: a sound, sealed lock of {args.cell}")
            return EXIT_OK
        lock = read_lock(args.lock)
        found = lock_problems(lock, matrix, cell)
        if not found and lock.sealed:
            print(f"{args.lock}: a sound, sealed lock of {args.cell}")
            return EXIT_OK
        if not found:  # pip-compile's lock as pip wrote it: sound once every hash is a file of its routed index
            index_urls = dict(_parse_index(value) for value in args.index)
            check_routing(matrix, lock, index_urls=index_urls, ca_bundle=args.ca_bundle)
            seal = seal_command(str(args.lock), cell.id) + "".join(f" --index {shlex.quote(v)}" for v in args.index)
            print(
                f"{args.lock}: a sound lock of {args.cell} (every hash is a file of its routed index), not sealed: "
                f"pip and pip-sync take it as it is; builds, bundles and the Ansible provisioning take it once "
                f"sealed: {with_options(f'`{seal}`', args)}"
            )
            return EXIT_OK
    else:
        found = problems(matrix)
    for problem in found:
        print(f"problem: {with_options(problem, args)}", file=sys.stderr)
    if found:
        print(f"{len(found)} problem(s) found", file=sys.stderr)
        return EXIT_FAILED
    locks = sum(1 for cell in matrix.cells if cell.lock_path.is_file())
    print(f"{matrix.path.name}: {len(matrix.cells)} cells, generated files up to date, {locks} lock(s) sound")
    return EXIT_OK


def cmd_manifest(args: argparse.Namespace, matrix: Matrix) -> int:
    path = args.file or vendored_manifest(matrix)
    data = read_manifest(path)
    release, packages = release_packages(data, path, args.release)
    findings = compare(matrix, packages, release)
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=2))
    else:
        print(format_findings(findings, matrix, release))
    differing = any(f.status != "same" for f in findings)
    return EXIT_FAILED if args.strict and differing else EXIT_OK


def cmd_build_image(args: argparse.Namespace, matrix: Matrix) -> int:
    mirror = args.mirror_settings
    cell = matrix.cell(args.cell)
    build = plan_image_build(
        matrix,
        cell,
        tags=tuple(args.tag),
        network=args.network,
        ca_bundle=args.ca_bundle or (mirror.ca_bundle if mirror else None),
        proxy=mirror.proxy.env() if mirror else None,
        lock=args.lock,
        target=args.target,
        no_cache=args.no_cache,
        dry_run=args.dry_run,
    )
    print("DOCKER_BUILDKIT=1 " + " ".join(shlex.quote(word) for word in build.command), flush=True)
    if args.dry_run:
        return EXIT_OK
    status = run_image_build(build)
    if status != 0:
        print(f"neuron-torch: error: the image build of {cell.id} failed (docker exit {status})", file=sys.stderr)
        return EXIT_FAILED
    print(f"built {', '.join(build.tags)}")
    return EXIT_OK


def _parse_index(value: str) -> tuple[str, str]:
    name, sep, url = value.partition("=")
    if not sep or not name or not url:
        raise NeuronTorchError(f"--index takes NAME=URL (e.g. neuron=https://mirror/neuron/simple), not {value!r}")
    return name, url


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuron-torch",
        description="Pinned, verified TorchNeuron environments: pick a cell, lock it, check it, build or bundle it.",
        epilog="Exit codes: 0 ok, 1 a check failed, 2 bad input. The README's quick start lists each user's path.",
    )
    parser.add_argument("--version", action="version", version=f"neuron-torch {__version__}")
    parser.add_argument("--matrix", type=Path, help="release matrix (default: constraints/matrix.toml)")
    parser.add_argument(
        "--project", type=Path, metavar="DIR",
        help="the neuron-torch checkout to work in (default: $NEURON_TORCH_PROJECT, or the checkout around you)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("matrix", help="list the cells of the release")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_matrix)

    p = sub.add_parser("cell", help="one cell's pins, install route and caveats")
    p.add_argument("id", help="cell id, e.g. 2.14-py3.12-ubuntu24.04")
    p.add_argument("--json", action="store_true")
    add_mirror_option(p)
    p.set_defaults(handler=cmd_cell)

    p = sub.add_parser("instance", help="what the release knows about an instance type")
    p.add_argument("type", help="e.g. trn2.48xlarge")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_instance)

    p = sub.add_parser("lock", help="write hash locks, each package routed to its index")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--cell", help="cell id")
    which.add_argument("--all", action="store_true", help="every cell")
    p.add_argument("--index", action="append", default=[], metavar="NAME=URL", help="override an index (mirror)")
    p.add_argument("--ca-bundle", type=Path, help="extra CA bundle (PEM) for TLS-intercepting proxies")
    p.add_argument("--find-links", type=Path, help="lock offline from a folder of wheels")
    p.add_argument("--out", type=Path, help="write the lock here instead of the cell's lock path")
    p.add_argument(
        "--resolver", choices=RESOLVERS, default="uv",
        help="uv (default: any cell from one machine) or pip-tools (pip-compile, for the Python it runs on)",
    )  # fmt: skip
    p.add_argument("--seal", type=Path, metavar="FILE", help="check and seal a lock made elsewhere (pip-compile)")
    add_mirror_option(p)
    p.set_defaults(handler=cmd_lock)

    p = sub.add_parser("check", help="validate the matrix, generated files and locks (or one lock: the lock gate)")
    p.add_argument("--lock", type=Path, metavar="FILE", help="check only this lock, as every consumer does")
    p.add_argument("--cell", help="the cell the --lock is for")
    p.add_argument("--sealed", action="store_true", help="also require the seal (the gate of builds and bundles)")
    p.add_argument("--index", action="append", default=[], metavar="NAME=URL", help="read an unsealed lock's "
                   "routing from this index instead of the release's (a mirror)")  # fmt: skip
    p.add_argument("--ca-bundle", type=Path, help="extra CA bundle (PEM) for TLS-intercepting proxies")
    p.set_defaults(handler=cmd_check)

    add_build_command(sub)
    add_bundle_command(sub)
    p = sub.add_parser("manifest", help="compare the pins with AWS's release manifest (n2-manifest.json)")
    p.add_argument("file", type=Path, nargs="?", help="n2-manifest.json (default: the matrix's vendored copy)")
    p.add_argument("--release", help="Neuron release in the manifest (default: the manifest's own version)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true", help="exit 1 when any pin differs")
    p.set_defaults(handler=cmd_manifest)
    p = sub.add_parser("render", help="write every generated file (or --check that none is stale)")
    p.add_argument("--check", action="store_true", help="exit 1 and name each stale file")
    p.set_defaults(handler=cmd_render)

    return parser


# --- bundle (issue 4: mirrors and offline bundles) -------------------------------------------------------------------
def add_bundle_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`neuron-torch bundle --cell ID --out DIR [--mirror FILE] [--host]`: an offline bundle of one cell."""
    from neuron_torch.bundle import make_bundle

    def cmd_bundle(args: argparse.Namespace, matrix: Matrix) -> int:
        cell = matrix.cell(args.cell)
        scopes = ("image", "host") if args.host else ("image",)
        manifest = make_bundle(matrix, cell, args.out, mirror=args.mirror_settings, lock_path=args.lock, scopes=scopes)
        print(f"bundled {cell.id} -> {manifest.parent} (install: {manifest.parent}/install.sh)")
        return EXIT_OK

    p = sub.add_parser("bundle", help="an offline bundle of one cell: wheels, apt packages, checksums, manifest")
    p.add_argument("--cell", required=True, help="cell id")
    p.add_argument("--out", type=Path, required=True, help="a new folder for the bundle")
    add_mirror_option(p)
    p.add_argument("--lock", type=Path, help="the lock to bundle (default: the cell's lock path)")
    p.add_argument("--host", action="store_true", help="include host-scope apt packages (the DKMS driver)")
    p.set_defaults(handler=cmd_bundle)


def add_mirror_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mirror", type=Path, help=f"mirror settings file (default: ${MIRROR_ENV_VAR})")


# --- build image (issue 5: the container image) -----------------------------------------------------------------------
def add_build_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("build", help="build a cell's container image or AMI (build image | build ami)")
    what = p.add_subparsers(dest="artifact", required=True, metavar="ARTIFACT")
    p = what.add_parser(
        "image", help="the cell's container image: tags neuron-torch:CELL (and :latest for the default)"
    )
    p.add_argument("--cell", required=True, help="cell id")
    p.add_argument("--tag", action="append", default=[], help="tag with this instead of the default tags (repeatable)")
    p.add_argument("--network", help="build network, e.g. host to reach a mirror or the test bed on loopback")
    p.add_argument("--ca-bundle", type=Path, help="CA bundle (PEM) for TLS-intercepting proxies: a build secret only")
    p.add_argument("--lock", type=Path, help="the hash lock to install (default: the cell's lock path)")
    add_mirror_option(p)
    p.add_argument("--target", help="stop at this Dockerfile stage (keyring, python, venv; default: the runtime image)")
    p.add_argument("--no-cache", action="store_true", help="rebuild every layer (the pip download cache is kept)")
    p.add_argument("--dry-run", action="store_true", help="print the docker command without running it")
    p.set_defaults(handler=cmd_build_image)

    p = what.add_parser(
        "ami", help="the cell's AMI with Packer, after fmt -check and validate (--only docker: locally)"
    )
    p.add_argument("--cell", required=True, help="cell id")
    p.add_argument("--only", choices=sorted(PACKER_SOURCES), help="build only this Packer source")
    p.add_argument("--packer", default="packer", help="the packer executable")
    p.add_argument("--lock", type=Path, help="the hash lock to install (default: the cell's lock path)")
    p.add_argument(
        "--var", action="append", default=[], metavar="NAME=VALUE",
        help="a Packer variable, e.g. region=eu-west-1 or subnet_id=subnet-0abc (repeatable)",
    )  # fmt: skip
    p.set_defaults(handler=cmd_build_ami)


def cmd_build_ami(args: argparse.Namespace, matrix: Matrix) -> int:
    extra = []
    for value in args.var:
        name, sep, _ = value.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise NeuronTorchError(f"--var takes NAME=VALUE (e.g. region=eu-west-1), not {value!r}")
        extra.append(f"-var={value}")
    return build_ami(matrix, args.cell, args.only, args.packer, extra, lock=args.lock)


_HINT = re.compile(r"`neuron-torch (?P<command>[a-z]+)(?P<rest>[^`]*)`")
_MIRROR_COMMANDS = {"cell", "lock", "bundle", "build"}


def with_options(message: str, args: argparse.Namespace) -> str:
    """Fix hints (`neuron-torch COMMAND ...`) repeat the options the user gave, so following them acts on the same
    release, project and mirror."""
    front = "".join(
        f" {flag} {shlex.quote(str(value))}"
        for flag, value in (("--project", args.project), ("--matrix", args.matrix))
        if value is not None
    )
    mirror = getattr(args, "mirror", None)

    def repeat(hint: re.Match[str]) -> str:
        rest = hint["rest"]
        if mirror is not None and hint["command"] in _MIRROR_COMMANDS and "--mirror" not in rest:
            rest += f" --mirror {shlex.quote(str(mirror))}"
        return f"`neuron-torch{front} {hint['command']}{rest}`"

    return _HINT.sub(repeat, message)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        matrix = load_matrix(args.matrix, args.project)
        if hasattr(args, "mirror"):
            # Commands that fetch or print URLs see the mirrored release; render and check keep the release's own.
            args.mirror_settings = load_mirror(args.mirror) if args.mirror else mirror_from_env()
            if args.mirror_settings:
                print(args.mirror_settings.describe(), file=sys.stderr)
                matrix = apply_mirror(matrix, args.mirror_settings)
        handler: Handler = args.handler
        code = handler(args, matrix)
        sys.stdout.flush()  # here, so that a closed pipe is caught below and not at interpreter exit
        return code
    except NeuronTorchError as error:
        print(f"neuron-torch: error: {with_options(str(error), args)}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:
        # The reader went away (`neuron-torch matrix | head -1`): stop quietly, as the Python docs recommend.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
