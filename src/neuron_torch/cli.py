"""The `neuron-torch` command: a thin layer over the library. Exit codes: 0 ok, 1 a check failed, 2 bad input,
130 interrupted (Ctrl-C).

Every subcommand is registered the same way: a function `add_NAME(sub)` in COMMANDS adds its parser, whose
`handler` (in neuron_torch.commands) imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from neuron_cell.boundary import OneLineParser, clip, guard
from neuron_torch import __version__, commands
from neuron_torch.choices import MIRROR_ENV_VAR, PACKER_SOURCES, RESOLVERS
from neuron_torch.errors import NeuronTorchError
from neuron_torch.hints import with_options

if TYPE_CHECKING:
    from typing import TypeAlias

    from neuron_torch.matrix import Matrix

    Handler: TypeAlias = Callable[[argparse.Namespace, Matrix], int]
    Subparsers: TypeAlias = argparse._SubParsersAction[OneLineParser]


def add_mirror_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mirror", type=Path, help=f"mirror settings file (default: ${MIRROR_ENV_VAR})")


def cell_parser(sub: Subparsers, name: str, help: str) -> OneLineParser:
    """A sub-command that works on one cell: its parser, with the required --cell."""
    p = sub.add_parser(name, help=help)
    p.add_argument("--cell", required=True, help="cell id")
    return p


def add_matrix(sub: Subparsers) -> None:
    p = sub.add_parser("matrix", help="list the cells of the release")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.cmd_matrix)


def add_cell(sub: Subparsers) -> None:
    p = sub.add_parser("cell", help="one cell's pins, install route and caveats")
    p.add_argument("id", help="cell id, e.g. 2.14-py3.12-ubuntu24.04")
    p.add_argument("--json", action="store_true")
    add_mirror_option(p)
    p.set_defaults(handler=commands.cmd_cell)


def add_instance(sub: Subparsers) -> None:
    p = sub.add_parser("instance", help="what the release knows about an instance type")
    p.add_argument("type", help="e.g. trn2.48xlarge")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.cmd_instance)


def add_lock(sub: Subparsers) -> None:
    p = sub.add_parser("lock", help="write hash locks, each package routed to its index")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--cell", help="cell id")
    which.add_argument("--all", action="store_true", help="every cell")
    p.add_argument("--index", action="append", default=[], metavar="NAME=URL", help="override an index (mirror)")
    p.add_argument("--ca-bundle", type=Path, help="extra CA bundle (PEM) for TLS-intercepting proxies")
    p.add_argument("--find-links", type=Path, help="lock offline from a folder of wheels")
    p.add_argument("--out", type=Path, help="write the lock here instead of the cell's lock path")
    p.add_argument(
        "--resolver", choices=RESOLVERS,
        help="uv (default: any cell from one machine) or pip-tools (pip-compile, for the Python it runs on)",
    )  # fmt: skip
    p.add_argument("--seal", type=Path, metavar="FILE", help="check and seal a lock made elsewhere (pip-compile)")
    add_mirror_option(p)
    p.set_defaults(handler=commands.cmd_lock)


def add_check(sub: Subparsers) -> None:
    p = sub.add_parser("check", help="validate the matrix, generated files and locks (or one lock: the lock gate)")
    p.add_argument("--lock", type=Path, metavar="FILE", help="check only this lock, as every consumer does")
    p.add_argument("--cell", help="the cell the --lock is for")
    p.add_argument("--sealed", action="store_true", help="also require the seal (the gate of builds and bundles)")
    p.add_argument("--cell-record", type=Path, metavar="FILE", help="check only this cell record (cell.json): its "
                   "schema version is the one this neuron-torch reads")  # fmt: skip
    p.add_argument("--index", action="append", default=[], metavar="NAME=URL", help="read an unsealed lock's "
                   "routing from this index instead of the release's (a mirror)")  # fmt: skip
    p.add_argument("--ca-bundle", type=Path, help="extra CA bundle (PEM) for TLS-intercepting proxies")
    p.set_defaults(handler=commands.cmd_check)


def add_build(sub: Subparsers) -> None:
    p = sub.add_parser("build", help="build a cell's container image or AMI (build image | build ami)")
    what = p.add_subparsers(dest="artifact", required=True, metavar="ARTIFACT")
    p = cell_parser(what, "image", "the cell's container image: tags neuron-torch:CELL (and :latest for the default)")
    p.add_argument("--tag", action="append", default=[], help="tag with this instead of the default tags (repeatable)")
    p.add_argument("--network", help="build network, e.g. host to reach a mirror or the test bed on loopback")
    p.add_argument("--ca-bundle", type=Path, help="CA bundle (PEM) for TLS-intercepting proxies: a build secret only")
    p.add_argument("--lock", type=Path, help="the hash lock to install (default: the cell's lock path)")
    add_mirror_option(p)
    p.add_argument("--target", help="stop at this Dockerfile stage (keyring, python, venv; default: the runtime image)")
    p.add_argument("--no-cache", action="store_true", help="rebuild every layer (the pip download cache is kept)")
    p.add_argument("--dry-run", action="store_true", help="print the docker command without running it")
    p.add_argument("--release", action="store_true", help="a release build: refuse a base image not pinned by "
                   "digest (publish image refuses an image built on one)")  # fmt: skip
    p.add_argument("--compare", metavar="IMAGE", help="after the build, check the image has the package set of IMAGE "
                   "(read before the build: e.g. the tag a rebuild of the same commit moves); exit 1 naming each "
                   "difference")  # fmt: skip
    p.set_defaults(handler=commands.cmd_build_image)

    p = cell_parser(what, "ami", "the cell's AMI with Packer, after fmt -check and validate (--only docker: locally)")
    p.add_argument("--only", choices=sorted(PACKER_SOURCES), help="build only this Packer source")
    p.add_argument("--packer", default="packer", help="the packer executable")
    p.add_argument("--lock", type=Path, help="the hash lock to install (default: the cell's lock path)")
    p.add_argument(
        "--var", action="append", default=[], metavar="NAME=VALUE",
        help="a Packer variable, e.g. region=eu-west-1 or subnet_id=subnet-0abc (repeatable)",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the AMI's name, tags, deprecation time, SSM "
                   "parameters and sharing (as Packer evaluates the templates) and build nothing")  # fmt: skip
    p.set_defaults(handler=commands.cmd_build_ami)


def add_publish(sub: Subparsers) -> None:
    p = sub.add_parser("publish", help="push a cell's built image to a registry and record its digest (publish image)")
    what = p.add_subparsers(dest="artifact", required=True, metavar="ARTIFACT")
    p = cell_parser(what, "image", "push neuron-torch:CELL as RELEASE-CELL-SHA (immutable), CELL and latest (moving)")
    p.add_argument("--registry", required=True, metavar="REG[/PATH]", help="e.g. registry.example.com/ml")
    p.add_argument("--record", type=Path, metavar="FILE", help="write the digest record here "
                   "(default: build/publish/TAG.json)")  # fmt: skip
    p.add_argument("--allow-dirty", action="store_true", help="publish from a checkout with uncommitted changes "
                   "(the immutable tag ends in -dirty)")  # fmt: skip
    p.add_argument("--sign-by", metavar="FINGERPRINT", help="sign each tag with this GPG key (simple signing)")
    p.add_argument("--registries-d", type=Path, metavar="DIR", help="registries.d folder naming where signatures "
                   "go (default: skopeo's, /etc/containers/registries.d)")  # fmt: skip
    p.set_defaults(handler=commands.cmd_publish_image)


def add_verify_image(sub: Subparsers) -> None:
    p = sub.add_parser("verify-image", help="pull an image as a signature policy allows: its signature and digest")
    p.add_argument("reference", metavar="REF", help="e.g. registry.example.com/ml/neuron-torch@sha256:...")
    p.add_argument("--policy", type=Path, required=True, help="the containers-policy.json to enforce")
    p.add_argument("--registries-d", type=Path, metavar="DIR", help="registries.d folder naming where signatures "
                   "are read (default: skopeo's)")  # fmt: skip
    p.set_defaults(matrix_free=commands.cmd_verify_image)  # reads no release


def add_bundle(sub: Subparsers) -> None:
    """`neuron-torch bundle --cell ID --out DIR [--mirror FILE] [--host]`: an offline bundle of one cell."""
    p = cell_parser(sub, "bundle", "an offline bundle of one cell: wheels, apt packages, checksums, manifest")
    p.add_argument("--out", type=Path, required=True, help="a new folder for the bundle")
    add_mirror_option(p)
    p.add_argument("--lock", type=Path, help="the lock to bundle (default: the cell's lock path)")
    p.add_argument("--host", action="store_true", help="include host-scope apt packages (the DKMS driver)")
    p.set_defaults(handler=commands.cmd_bundle)


def add_manifest(sub: Subparsers) -> None:
    p = sub.add_parser("manifest", help="compare the pins with AWS's release manifest (n2-manifest.json)")
    p.add_argument("file", type=Path, nargs="?", help="n2-manifest.json (default: the matrix's vendored copy)")
    p.add_argument("--release", help="Neuron release in the manifest (default: the manifest's own version)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true", help="exit 1 when any pin differs")
    p.set_defaults(handler=commands.cmd_manifest)


def add_render(sub: Subparsers) -> None:
    p = sub.add_parser("render", help="write every generated file (or --check that none is stale)")
    p.add_argument("--check", action="store_true", help="exit 1 and name each stale file")
    p.set_defaults(handler=commands.cmd_render)


def add_cluster_report(sub: Subparsers) -> None:
    p = sub.add_parser("cluster-report", help="one verdict for a multi-node verify-device run, node by stage")
    p.add_argument("dir", type=Path, help="the --report-dir the nodes wrote node-<rank>.json to")
    p.add_argument("--expect", type=int, required=True, metavar="N", help="the number of nodes of the run")
    p.add_argument("--out", type=Path, metavar="DIR", help="write cluster-report.json/.md here (default: DIR)")
    p.set_defaults(matrix_free=commands.cmd_cluster_report)  # reads only its folder: no release, no checkout


# The subcommands, in the order `--help` lists them.
COMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    add_matrix,
    add_cell,
    add_instance,
    add_lock,
    add_check,
    add_build,
    add_publish,
    add_verify_image,
    add_bundle,
    add_manifest,
    add_render,
    add_cluster_report,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="neuron-torch",
        description="Pinned, verified TorchNeuron environments: pick a cell, lock it, check it, build or bundle it.",
        epilog="Exit codes: 0 ok, 1 a check failed (or an internal error, its traceback in the log file named), "
        "2 bad input, 130 interrupted. The README's quick start lists each user's path.",
    )
    parser.add_argument("--version", action="version", version=f"neuron-torch {__version__}")
    parser.add_argument("--matrix", type=Path, help="release matrix (default: constraints/matrix.toml)")
    parser.add_argument(
        "--project", type=Path, metavar="DIR",
        help="the neuron-torch checkout to work in (default: $NEURON_TORCH_PROJECT, or the checkout around you)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point: the command inside the error boundary (one line on stderr for whatever goes wrong)."""
    return guard("neuron-torch", lambda: run(argv))


def run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if hasattr(args, "matrix_free"):
            code: int = args.matrix_free(args)
            sys.stdout.flush()
            return code
        from neuron_torch.matrix import load_matrix
        from neuron_torch.mirror import apply_mirror, load_mirror, mirror_from_env

        matrix = load_matrix(args.matrix, args.project)
        if hasattr(args, "mirror"):
            # Commands that fetch or print URLs see the mirrored release; render and check keep the release's own.
            args.mirror_settings = load_mirror(args.mirror) if args.mirror else mirror_from_env()
            if args.mirror_settings:
                matrix = apply_mirror(matrix, args.mirror_settings)  # checked first: a refused mirror is one line
                print(args.mirror_settings.describe(), file=sys.stderr)
        handler: Handler = args.handler
        code = handler(args, matrix)
        sys.stdout.flush()  # here, so that a closed pipe is caught below and not at interpreter exit
        return code
    except NeuronTorchError as error:
        print(f"neuron-torch: error: {clip(with_options(str(error), args))}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:
        # The reader went away (`neuron-torch matrix | head -1`): stop quietly, as the Python docs recommend.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
