"""The handlers of `neuron-torch`'s subcommands: `handler(args, matrix) -> exit code`.

Each handler imports the library modules it needs when it runs, so that starting the command (and `--version`,
`--help`, `matrix`) does not import every subcommand's modules.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from typing import TYPE_CHECKING

from neuron_cell.boundary import quote
from neuron_torch.errors import EXIT_FAILED, EXIT_OK, NeuronTorchError
from neuron_torch.hints import with_options

if TYPE_CHECKING:
    from pathlib import Path

    from neuron_torch.matrix import Matrix


def cmd_matrix(args: argparse.Namespace, matrix: Matrix) -> int:
    from neuron_torch.cellinfo import cell_record

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
    from neuron_torch.cellinfo import caveats, cell_record, install_route, relative

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
    from neuron_torch.cellinfo import relative
    from neuron_torch.render import check_render_targets, stale_files, write_rendered

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
    check_render_targets(matrix)
    changed = write_rendered(matrix)
    for path in changed:
        print(f"wrote {relative(path, matrix)}")
    print(f"{len(changed)} file(s) changed")
    return EXIT_OK


def cmd_lock(args: argparse.Namespace, matrix: Matrix) -> int:
    from neuron_torch.cellinfo import relative
    from neuron_torch.lock import check_target, lock_cell, seal_lock

    cells = list(matrix.cells) if args.all else [matrix.cell(args.cell)]
    if args.out and len(cells) > 1:
        raise NeuronTorchError("--out names one file: use it with --cell, not --all")
    if args.seal and (args.all or args.find_links or args.resolver):
        raise NeuronTorchError("--seal FILE seals one lock made elsewhere: use it with --cell ID, without --all, "
                               "--find-links or --resolver (the lock keeps the resolver that made it)")  # fmt: skip
    index_urls = dict(_parse_index(value) for value in args.index)
    ca_bundle = args.ca_bundle or (args.mirror_settings.ca_bundle if args.mirror_settings else None)
    if args.seal:
        path = seal_lock(matrix, cells[0], args.seal, index_urls=index_urls, ca_bundle=ca_bundle, out=args.out)
        print(f"sealed {cells[0].id} -> {relative(path, matrix)} (every hash is a file of its routed index)")
        return EXIT_OK
    for cell in cells:  # every lock's destination, before the first resolution
        check_target(args.out or cell.lock_path)
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
            resolver=args.resolver or "uv",
        )
        print(f"locked {cell.id} -> {relative(path, matrix)}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace, matrix: Matrix) -> int:
    from neuron_torch.lockfile import gate_lock, lock_problems, read_lock, seal_command

    with_lock = {"--sealed": args.sealed, "--index": args.index, "--ca-bundle": args.ca_bundle}
    if args.cell_record:
        if args.lock or args.cell or any(with_lock.values()):
            raise NeuronTorchError("check --cell-record checks one cell record; --lock, --cell and their options go "
                                   "in a check of their own")  # fmt: skip
        return _check_cell_record(args.cell_record)
    if args.lock or args.cell:
        if not (args.lock and args.cell):
            raise NeuronTorchError("check --lock FILE needs --cell ID (the cell the lock is for), and the reverse")
        cell = matrix.cell(args.cell)
        if args.sealed:  # the consumers' gate (the Ansible provisioning runs this)
            gate_lock(matrix, cell, args.lock)
            print(f"{args.lock}: a sound, sealed lock of {args.cell}")
            return EXIT_OK
        lock = read_lock(args.lock, cell.id)
        found = lock_problems(lock, matrix, cell)
        if not found and lock.sealed:
            print(f"{args.lock}: a sound, sealed lock of {args.cell}")
            return EXIT_OK
        if not found:  # pip-compile's lock as pip wrote it: sound once every hash is a file of its routed index
            from neuron_torch.lock import check_routing

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
        from neuron_torch.check import problems

        given = [option for option, value in with_lock.items() if value]
        if given:  # the whole-release check would ignore it
            raise NeuronTorchError(f"check {given[0]} goes with --lock FILE --cell ID (the check of one lock)")
        found = problems(matrix)
    for problem in found:
        print(f"problem: {with_options(problem, args)}", file=sys.stderr)
    if found:
        print(f"{len(found)} problem(s) found", file=sys.stderr)
        return EXIT_FAILED
    locks = sum(1 for cell in matrix.cells if cell.lock_path.is_file())
    print(f"{matrix.path.name}: {len(matrix.cells)} cells, generated files up to date, {locks} lock(s) sound")
    return EXIT_OK


def _check_cell_record(path: Path) -> int:
    from neuron_torch.cellrecord import read_cell_record

    record = read_cell_record(path)
    print(f"{path}: a cell record of schema {record['schema']} (cell {record['id']}, {record['release']})")
    return EXIT_OK


def cmd_manifest(args: argparse.Namespace, matrix: Matrix) -> int:
    from neuron_torch.manifest import (
        Status,
        compare,
        format_findings,
        read_manifest,
        release_packages,
        vendored_manifest,
    )

    path = args.file or vendored_manifest(matrix)
    data = read_manifest(path)
    release, packages = release_packages(data, path, args.release)
    findings = compare(matrix, packages, release)
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=2))
    else:
        print(format_findings(findings, matrix, release))
    differing = any(f.status != Status.SAME for f in findings)
    return EXIT_FAILED if args.strict and differing else EXIT_OK


def cmd_build_image(args: argparse.Namespace, matrix: Matrix) -> int:
    from neuron_torch.build import plan_image_build, run_image_build

    mirror = args.mirror_settings
    cell = matrix.cell(args.cell)
    if os.environ.get("DOCKER") and not args.dry_run:
        from neuron_torch.files import check_executable

        check_executable(os.environ["DOCKER"], "DOCKER")
    if args.compare and args.target:
        from neuron_torch.build import check_target

        check_target(matrix, args.target, compare=True)  # before the image compared with is read
    before = None
    if args.compare and not args.dry_run:  # read first: the build may move the tag compared with
        from neuron_torch.build import docker_binary
        from neuron_torch.packageset import package_set

        before = package_set(docker_binary(), args.compare)
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
        release=args.release,
    )
    print("DOCKER_BUILDKIT=1 " + " ".join(shlex.quote(word) for word in build.command), flush=True)
    if args.dry_run:
        if args.compare:
            not_done = "not in a dry run: nothing is built"
            print(f"then: compare the built image's package set with {args.compare} ({not_done})")
        return EXIT_OK
    status = run_image_build(build)
    if status != 0:
        print(f"neuron-torch: error: the image build of {cell.id} failed (docker exit {status})", file=sys.stderr)
        return EXIT_FAILED
    print(f"built {', '.join(build.tags)}")
    if before is not None:
        from neuron_torch.packageset import check_same, differences, package_set

        after = package_set(build.command[0], build.tags[0])
        changed = differences(before, after)
        for line in changed:
            print(f"differs from {args.compare}: {line}")
        print(check_same(changed, after, args.compare, build.tags[0]))
    return EXIT_OK


def cmd_publish_image(args: argparse.Namespace, matrix: Matrix) -> int:
    from neuron_torch.cellinfo import relative
    from neuron_torch.publish import publish_image

    cell = matrix.cell(args.cell)
    publication, record = publish_image(
        matrix, cell, args.registry, record=args.record, allow_dirty=args.allow_dirty, sign_by=args.sign_by,
        registries_d=args.registries_d,
    )  # fmt: skip
    for tag in [publication.immutable_tag, *publication.moving_tags]:
        print(f"pushed {publication.repository}:{tag}")
    print(f"digest {publication.digest}\nreference {publication.reference}")
    print(f"sboms {publication.sboms['reference']} (digest {publication.sboms['digest']})")
    print(f"record {relative(record, matrix)}")
    return EXIT_OK


def cmd_verify_image(args: argparse.Namespace) -> int:
    from neuron_torch.verify_image import verify_image

    verified = verify_image(args.reference, args.policy, args.registries_d)
    print(f"verified {args.reference}: the signature {args.policy} requires, digest {verified.digest}")
    if verified.packages is None:
        print("bill of materials: none (no io.neuron-torch.bom label)")
    else:
        pip, apt = verified.packages["pip"], verified.packages["apt"]
        print(f"bill of materials: {verified.bom}, its SBOMs list the image's {pip} pip and {apt} apt packages")
        print(f"SBOMs beside it: {verified.sboms}, the image's own")
    return EXIT_OK


def _parse_index(value: str) -> tuple[str, str]:
    from neuron_torch.urls import check_url

    name, sep, url = value.partition("=")
    if not sep or not name or not url:
        raise NeuronTorchError(f"--index takes NAME=URL (e.g. neuron=https://mirror/neuron/simple), not {quote(value)}")
    return name, check_url(url, f"--index {name}")


def cmd_bundle(args: argparse.Namespace, matrix: Matrix) -> int:
    from neuron_torch.bundle import make_bundle
    from neuron_torch.matrix import AptScope

    cell = matrix.cell(args.cell)
    scopes = (AptScope.IMAGE, AptScope.HOST) if args.host else (AptScope.IMAGE,)
    manifest = make_bundle(matrix, cell, args.out, mirror=args.mirror_settings, lock_path=args.lock, scopes=scopes)
    print(f"bundled {cell.id} -> {manifest.parent} (install: {manifest.parent}/install.sh)")
    return EXIT_OK


def cmd_build_ami(args: argparse.Namespace, matrix: Matrix) -> int:
    from neuron_torch.files import find_program
    from neuron_torch.packer import build as build_ami

    packer = find_program(args.packer) or args.packer  # Packer runs in the checkout: `--packer ./packer` is ours
    extra = []
    for value in args.var:
        name, sep, _ = value.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise NeuronTorchError(f"--var takes NAME=VALUE (e.g. region=eu-west-1), not {quote(value)}")
        extra.append(f"-var={value}")
    if args.dry_run:
        from neuron_torch.packer import describe, identity

        print(describe(identity(matrix, matrix.cell(args.cell), packer=packer, extra=extra, lock=args.lock)))
        return EXIT_OK
    return build_ami(matrix, args.cell, only=args.only, packer=packer, extra=extra, lock=args.lock)


def cmd_cluster_report(args: argparse.Namespace) -> int:
    from neuron_torch import clusterreport

    return clusterreport.run(args.dir, args.expect, args.out)
