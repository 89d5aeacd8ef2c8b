"""SSH hosts for the tests: containers that run systemd as PID 1 and sshd, each on its own loopback port.

`python -m tests.testbed.hosts up NAME... [--dir DIR] [--prefix P]` starts hosts (containers P-NAME; remove them
with `docker rm -f`) and writes an inventory and known_hosts under DIR; the tests use `Fleet` directly. Every host
is one container of one shared host image (`neuron-torch-host:<base tag>`, built once from a base image, keyed by
the base and the rendered Dockerfile), so starting eight costs eight `docker run`s, not eight builds. The base is
the Ubuntu 24.04 twin (`TWIN`, traits.toml [twins]), or another twin given as `base` (the 26.04 twin's for the README's
default cell): a host starts where a Canonical Ubuntu AMI's instance starts.

What a host imitates: every [ami] trait of traits.toml (tests/testbed/ami_traits.py reads them back from a fresh
host in tests/integration/test_fleet.py), and where each comes from:
- systemd as PID 1 with the apt-daily timers and unattended-upgrades enabled: Canonical's Ubuntu AMIs enable
  unattended-upgrades and the apt-daily timers (shared/NEURON-FACTS.md section 13).
- a login user `ubuntu` (uid 1000, the twin's) with passwordless sudo through /etc/sudoers.d/90-cloud-init-users:
  Canonical's AMIs log in as `ubuntu` with passwordless sudo (section 13; the file name is cloud-init's).
- python3 installed, python3-venv not: cloud-init, which the AMIs run, is a Python 3 program.
- apt's package lists kept (an AMI is captured with the lists of its build; a container image is not): python_env
  installs the distro's python3.X-venv without refreshing them, after neuron_repo refreshed the Neuron source only.
- gpg installed: Canonical's server cloud images carry it (software-properties-common, which they install, depends
  on it); neuron_repo reads the Neuron key with `gpg --show-keys` and fails without it (found by the converge here;
  the twin container base has none). Not yet an [ami] trait in traits.toml; an AMI's package manifest is the check.
- the kernel metapackages linux-aws, linux-image-aws and linux-headers-aws installed (empty stand-ins): Canonical's
  AMIs get their kernel through them, and they move to new kernels unless held (section 13).
- cloud-init's state as its first boot leaves it (cloudinit.readthedocs.io, "Directory layout"): /etc/cloud/cloud.cfg.d
  in the image; per host /var/lib/cloud/instances/<instance id>/ (an EC2-style id, i- and 17 hex digits, with
  boot-finished), the /var/lib/cloud/instance link to it and /var/lib/cloud/data/instance-id.
- /etc/machine-id empty in the image, as a cleaned AMI captures it; systemd makes a new one when each host boots
  (machine-id(5)), so no two hosts share one.
- sshd with key-only login and host keys of its own (ed25519, rsa, ecdsa), made when the host is created (no two
  hosts share a key, as cloud-init makes them on first boot); the test bed writes the ed25519 key to a known_hosts
  file, the way a user has them, so clients connect with StrictHostKeyChecking=yes.
- /etc/os-release's PRETTY_NAME as Ubuntu writes it ("Ubuntu 24.04 LTS"): the twin base's names Debian, and
  Ansible's distribution facts read any "Debian" in os-release as Debian (ansible.module_utils.facts.system.
  distribution, parse_distribution_file_Debian): provision.yml's OS check refused the twin host (found by the
  converge in tests/integration/test_fleet.py).
- the host shares the controller's network (it reaches the test bed on 127.0.0.1) and sshd listens on 127.0.0.1 on a
  port of its own; a stopped host refuses connections, as a powered-off machine's address does.
Not imitated: the kernel (containers share the controller's; `uname -r` is not an Ubuntu AWS kernel), cloud-init's
own run (its state is laid out, the program is not installed: no datasource answers in a container), the apt
archive (the twin is Debian underneath, traits.toml [twins]), /dev/neuron* devices.

systemd runs unprivileged: tmpfs on /run and /run/lock, SIGRTMIN+3 to stop it, and /sys/fs/cgroup bound one of two
ways, chosen by the image's systemd version (`needs_cgroup2`). A systemd that takes cgroup v1 (the 24.04 twin's 257)
gets a read-only bind of this machine's cgroups (v1 here; a real 24.04 AMI boots the unified hierarchy: not
imitated). One that boots only on the unified cgroup2 hierarchy (>= 258, traits.toml [ami.cgroup2]: the 26.04 twin's
262, as Ubuntu 26.04's 259) gets a subfolder of its own of a cgroup2 hierarchy this machine mounts as root
(tests/testbed/cgroup2.py), bound read-write: systemd makes its cgroups there as on a machine of its own, and the
subfolder goes with the host (Fleet.remove). tmp.mount is masked: Debian's systemd mounts a tmpfs on /tmp, which an
unprivileged container cannot, and Ubuntu does not (its /tmp is on the root file system).
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import re
import secrets
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.testbed import cgroup2
from tests.testbed.cache import key
from tests.testbed.traits import traits

DOCKER = "/usr/bin/docker"
TWIN = "ubuntu24.04"  # the Ubuntu release whose AMI the hosts start as (traits.toml [twins])
DEFAULT_BASE: str = traits()["twins"][TWIN]["image"]
KEY_LABEL = "io.neuron-torch.testbed.key"
HOST_PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "unattended-upgrades", "sudo", "python3", "gpg")
HOST_KEY_TYPES = ("ed25519", "rsa", "ecdsa")
CLOUD = "/var/lib/cloud"
# Empty packages with the names of the metapackages through which Canonical's AMIs get their kernel.
KERNEL_PACKAGES = ("linux-image-aws", "linux-headers-aws", "linux-aws")
USER = "ubuntu"
UID = 1000
SUDOERS = "/etc/sudoers.d/90-cloud-init-users"
RUN_FLAGS = (
    "--network=host",
    "--tmpfs=/run",
    "--tmpfs=/run/lock",
    "--stop-signal=SIGRTMIN+3",
)
CGROUP_V1 = "--volume=/sys/fs/cgroup:/sys/fs/cgroup:ro"  # the machine's cgroup v1, read-only (needs_cgroup2: False)

DOCKERFILE = """\
FROM {base}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {packages} \\
 && rm -rf /etc/ssh/ssh_host_* \\
 && (id -u {user} >/dev/null 2>&1 || useradd --create-home --uid {uid} --shell /bin/bash {user}) \\
 && printf '{user} ALL=(ALL) NOPASSWD:ALL\\n' >{sudoers} && chmod 0440 {sudoers} \\
 && for p in {kernel_packages}; do mkdir -p /tmp/$p/DEBIAN \\
      && printf 'Package: %s\\nVersion: 0.0-testbed\\nArchitecture: all\\n' $p >/tmp/$p/DEBIAN/control \\
      && printf 'Maintainer: neuron-torch test bed <dev@neuron-torch.invalid>\\n' >>/tmp/$p/DEBIAN/control \\
      && printf 'Description: empty stand-in for the Ubuntu metapackage %s\\n' $p >>/tmp/$p/DEBIAN/control \\
      && dpkg-deb --build /tmp/$p /tmp/$p.deb >/dev/null && dpkg -i /tmp/$p.deb >/dev/null && rm -rf /tmp/$p*; done \\
 && systemctl enable ssh.service apt-daily.timer apt-daily-upgrade.timer unattended-upgrades.service \\
 && systemctl mask getty@tty1.service console-getty.service systemd-udevd.service systemd-udevd-control.socket \\
      systemd-udevd-kernel.socket systemd-remount-fs.service systemd-firstboot.service tmp.mount \\
 && mkdir -p /etc/cloud/cloud.cfg.d && rm -rf {cloud} && : >/etc/machine-id && rm -f /var/lib/dbus/machine-id \\
 && sed -i 's/^PRETTY_NAME=.*/PRETTY_NAME="Ubuntu {version} LTS"/' /usr/lib/os-release
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""

SSHD_CONFIG = """\
# Written by tests/testbed/hosts.py: this host's own loopback port and host key; key-only login.
Port {port}
ListenAddress 127.0.0.1
HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_rsa_key
HostKey /etc/ssh/ssh_host_ecdsa_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
"""


class HostError(Exception):
    """A host could not be built or started; the message says what and how to fix it."""


def docker(*args: str, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run([DOCKER, *args], capture_output=True, input=stdin)
    if check and result.returncode != 0:
        raise HostError(f"docker {' '.join(args[:3])} ... failed ({result.returncode}): {result.stderr.decode()}")
    return result


def fleet_cell(matrix_path: Path | None = None) -> str:
    """The test release's distro-route cell on TWIN: the cell the tests and bench-fleet converge these hosts to (the
    hosts' own python3 is its Python, as on the AMI)."""
    from neuron_torch.matrix import load_matrix

    path = matrix_path or Path(__file__).resolve().parents[2] / "constraints" / "test-matrix.toml"
    cells = [c.id for c in load_matrix(path).cells if c.os.id == TWIN and c.python_route == "distro"]
    if not cells:
        raise HostError(f"{path} has no distro-route cell on {TWIN}: the hosts have no cell to converge to")
    return cells[0]


def twin_of(base: str) -> str:
    """The twin (traits.toml [twins]) whose image is `base`: the Ubuntu release its hosts name in os-release."""
    return next((twin for twin, entry in traits()["twins"].items() if entry["image"] == base), TWIN)


@functools.cache
def systemd_major(image: str) -> int:
    """The major version of `image`'s systemd package (dpkg's record; nothing is booted)."""
    query = docker("run", "--rm", "--network=none", "--entrypoint=dpkg-query", image, "-W", "-f=${Version}", "systemd")
    match = re.match(r"(?:\d+:)?(\d+)", query.stdout.decode())
    if match is None:
        raise HostError(f"{image} holds no systemd package: a host image needs it ({query.stdout.decode()!r})")
    return int(match[1])


def needs_cgroup2(image: str) -> bool:
    """True when `image`'s systemd boots only on the unified cgroup2 hierarchy (traits.toml [ami.cgroup2])."""
    return systemd_major(image) >= int(traits()["ami"]["cgroup2"]["systemd_only_from"])


def host_image_name(base: str) -> str:
    return "neuron-torch-host:" + base.rsplit(":", 1)[-1]


def build_host_image(base: str = DEFAULT_BASE) -> str:
    """The shared host image for `base` (built unless one with the same key exists); returns its name."""
    dockerfile = DOCKERFILE.format(
        base=base, packages=" ".join(HOST_PACKAGES), kernel_packages=" ".join(KERNEL_PACKAGES),
        user=USER, uid=UID, sudoers=SUDOERS, cloud=CLOUD, version=traits()["twins"][twin_of(base)]["version"],
    )  # fmt: skip
    return build_keyed(host_image_name(base), base, dockerfile)


def build_keyed(image: str, base: str, dockerfile: str) -> str:
    """Build `image` from DOCKERFILE (FROM `base`) unless one with the same key exists; returns its name."""
    base_id = docker("image", "inspect", "--format", "{{.Id}}", base, check=False)
    if base_id.returncode != 0:
        raise HostError(f"the base image {base} is missing: run scripts/testbed.sh build")
    # Keyed by the base and the Dockerfile as rendered (everything the image is made of), not by this module's code:
    # a change to the inventory or the start of a host does not rebuild the image.
    stage_key = key(base_id.stdout.decode().strip(), dockerfile)
    current = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{KEY_LABEL}"}}}}', image, check=False)
    if current.returncode == 0 and current.stdout.decode().strip() == stage_key:
        return image
    dockerfile += f"LABEL {KEY_LABEL}={stage_key}\n"
    built = subprocess.run(
        [DOCKER, "build", "--network=host", "--quiet", "--tag", image, "-"],
        input=dockerfile.encode(),
        capture_output=True,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
    )
    if built.returncode != 0:
        raise HostError(f"docker build of {image} failed ({built.returncode}): {built.stderr.decode()[-3000:]}")
    return image


def lent_checkout() -> tuple[str, ...]:
    """docker --volume specs that lend a host this checkout and its .venv's Python, read-only at the same paths.
    No Python of the twin can get a torch with gloo here (the only CPU torch wheel is for Python 3.11), so a host that
    runs verify-device's multi-node mode borrows the checkout's: the one thing the twin cannot carry."""
    lent = (str(Path(__file__).resolve().parents[2]), str(Path(sys.base_prefix).resolve()))
    return tuple(f"{path}:{path}:ro" for path in lent)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _add(tar: tarfile.TarFile, path: str, data: bytes, mode: int, uid: int = 0) -> None:
    info = tarfile.TarInfo(path.lstrip("/"))
    info.size, info.mode, info.uid, info.gid, info.mtime = len(data), mode, uid, uid, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_link(tar: tarfile.TarFile, path: str, target: str) -> None:
    link = tarfile.TarInfo(path.lstrip("/"))
    link.type, link.linkname, link.mtime = tarfile.SYMTYPE, target, int(time.time())
    tar.addfile(link)


def _add_dir(tar: tarfile.TarFile, path: str, mode: int, uid: int) -> None:
    info = tarfile.TarInfo(path.lstrip("/"))
    info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, mode, uid, uid, int(time.time())
    tar.addfile(info)


@dataclass(frozen=True)
class Host:
    name: str  # the inventory name
    container: str
    port: int
    host_key_pub: str

    @property
    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key_pub}"

    @property
    def ssh_url(self) -> str:
        return f"ssh://{USER}@127.0.0.1:{self.port}"


class Fleet:
    """Hosts started from one host image; keys, known_hosts and an inventory under `folder`."""

    def __init__(self, folder: Path, prefix: str, base: str = DEFAULT_BASE, image: str | None = None) -> None:
        self.folder = folder
        self.prefix = prefix
        self.folder.mkdir(parents=True, exist_ok=True)
        self.image = image or build_host_image(base)
        self.identity = folder / "id_ed25519"
        self.known_hosts = folder / "known_hosts"
        self.hosts: dict[str, Host] = {}
        self.cgroups: set[str] = set()  # the containers given a cgroup2 subfolder (removed with them)
        if not self.identity.exists():
            self._keygen(self.identity, "neuron-torch-testbed-controller")

    @staticmethod
    def _keygen(path: Path, comment: str, kind: str = "ed25519") -> None:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", comment, "-f", str(path)],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def _payload(self, name: str, port: int) -> tuple[bytes, str]:
        """The host's own files: sshd's port and host keys, the controller's key, cloud-init's first-boot state."""
        keydir = self.folder / "hostkeys" / name
        keydir.mkdir(parents=True, exist_ok=True)
        for old in keydir.glob("ssh_host_*"):
            old.unlink()
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            _add(tar, "/etc/ssh/sshd_config.d/10-testbed.conf", SSHD_CONFIG.format(port=port).encode(), 0o644)
            for kind in HOST_KEY_TYPES:
                private = keydir / f"ssh_host_{kind}_key"
                self._keygen(private, name, kind)
                _add(tar, f"/etc/ssh/{private.name}", private.read_bytes(), 0o600)
                _add(tar, f"/etc/ssh/{private.name}.pub", private.with_suffix(".pub").read_bytes(), 0o644)
            _add_dir(tar, f"/home/{USER}/.ssh", 0o700, UID)
            authorized = self.identity.with_suffix(".pub").read_bytes()
            _add(tar, f"/home/{USER}/.ssh/authorized_keys", authorized, 0o600, UID)
            instance_id = "i-" + secrets.token_hex(9)[:17]  # an EC2 instance id's form
            for folder in (CLOUD, f"{CLOUD}/instances", f"{CLOUD}/instances/{instance_id}", f"{CLOUD}/data"):
                _add_dir(tar, folder, 0o755, 0)
            _add(tar, f"{CLOUD}/instances/{instance_id}/boot-finished", b"", 0o644)
            _add(tar, f"{CLOUD}/data/instance-id", f"{instance_id}\n".encode(), 0o644)
            _add_link(tar, f"{CLOUD}/instance", f"{CLOUD}/instances/{instance_id}")
        public = " ".join((keydir / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        return buffer.getvalue(), public

    def start(
        self,
        name: str,
        image: str | None = None,
        volumes: tuple[str, ...] = (),
        addresses: Mapping[str, str] | None = None,
        flags: Sequence[str] = (),
    ) -> Host:
        """Start host `name` (container <prefix>-<name>, replaced if it exists) and wait until sshd answers.
        `volumes`: docker --volume specs, for a test that lends the host a folder of this machine. `addresses`: the
        names its /etc/hosts resolves (a cluster's DNS; its own name at 127.0.0.1 unless given). `flags`: more
        `docker create` options (a benchmark's --cpus)."""
        container = f"{self.prefix}-{name}"
        docker("rm", "-f", container, check=False)
        port = free_port()
        names = {name: "127.0.0.1", **(addresses or {})}
        options = ["--name", container, "--hostname", name, *RUN_FLAGS, *flags]
        options += [f"--add-host={host}:{address}" for host, address in names.items()]
        options += [f"--volume={volume}" for volume in volumes]
        options.append(self._cgroup_volume(container, image or self.image))
        docker("create", *options, image or self.image)
        payload, public = self._payload(name, port)
        docker("cp", "-", f"{container}:/", stdin=payload)
        docker("start", container)
        host = Host(name, container, port, public)
        self.hosts[name] = host
        self._write_files()
        self._wait_for_ssh(host)
        return host

    def _cgroup_volume(self, container: str, image: str) -> str:
        """The /sys/fs/cgroup the host's systemd boots on: a new cgroup2 subfolder of its own, or the v1 bind."""
        if not needs_cgroup2(image):
            return CGROUP_V1
        try:
            folder = cgroup2.make(container)
        except cgroup2.Cgroup2Error as error:
            raise HostError(f"host {container}: systemd {systemd_major(image)} of {image}: {error}") from error
        self.cgroups.add(container)
        return f"--volume={folder}:/sys/fs/cgroup:rw"

    def _wait_for_ssh(self, host: Host, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", host.port), timeout=2) as conn:
                    if conn.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.3)
        logs = docker("logs", "--tail", "30", host.container, check=False).stdout.decode(errors="replace")
        raise HostError(f"host {host.name}: sshd did not answer on 127.0.0.1:{host.port} in {timeout:.0f} s: {logs}")

    def stop(self, name: str) -> None:
        """Stop the host's container: its port then refuses connections, as a powered-off machine's does."""
        docker("stop", "--time", "10", self.hosts[name].container)

    def exec(self, name: str, *command: str) -> subprocess.CompletedProcess[bytes]:
        return docker("exec", self.hosts[name].container, *command, check=False)

    def put(self, name: str, files: Mapping[str, tuple[bytes, int]], links: Mapping[str, str] | None = None) -> None:
        """Write FILES ({path: (data, mode)}, root's) and symbolic LINKS ({path: target}) into host NAME."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path, (data, mode) in files.items():
                _add(tar, path, data, mode)
            for path, target in (links or {}).items():
                _add_link(tar, path, target)
        docker("cp", "-", f"{self.hosts[name].container}:/", stdin=buffer.getvalue())

    def commit(self, name: str, image: str) -> str:
        docker("commit", self.hosts[name].container, image)
        return image

    def remove(self) -> None:
        """Remove every host's container (and one whose start failed), then the cgroup2 subfolders they had."""
        containers = {h.container for h in self.hosts.values()} | self.cgroups
        if containers:
            docker("rm", "-f", *sorted(containers), check=False)
        for container in sorted(self.cgroups):
            cgroup2.remove(container)
        self.cgroups.clear()

    def host_key_options(self) -> list[str]:
        """Host-key checking on, against this fleet's known_hosts (what a user's ~/.ssh/known_hosts holds)."""
        return ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes"]

    def ssh_options(self) -> list[str]:
        """The client options every tool here uses: this fleet's key and the host-key options."""
        identity = ["-o", f"IdentityFile={self.identity}", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
        return identity + self.host_key_options()

    def _write_files(self) -> None:
        self.known_hosts.write_text("".join(h.known_hosts_line + "\n" for h in self.hosts.values()))
        self.inventory().write_text(json.dumps(self.inventory_data(), indent=2) + "\n")

    def inventory(self) -> Path:
        return self.folder / "inventory.json"

    def inventory_data(self) -> dict[str, object]:
        common = " ".join(self.host_key_options())
        hosts = {h.name: {"ansible_host": "127.0.0.1", "ansible_port": h.port} for h in self.hosts.values()}
        return {
            "all": {
                "hosts": hosts,
                "vars": {
                    "ansible_user": USER,
                    "ansible_ssh_private_key_file": str(self.identity),
                    "ansible_ssh_common_args": common,
                    # One SSH connection per host for the whole run and the runs that follow within two minutes
                    # (ControlPersist), modules piped through it (pipelining): no compression, the hosts are on the
                    # loopback, where it only costs CPU.
                    "ansible_ssh_args": "-o ControlMaster=auto -o ControlPersist=120s",
                    "ansible_pipelining": True,
                },
            }
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.testbed.hosts", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("action", choices=["up", "image"], help="up: start hosts NAME...; image: build the host image")
    parser.add_argument("names", nargs="*")
    parser.add_argument("--dir", type=Path, default=Path(".testbed/hosts"))
    parser.add_argument("--base", default=DEFAULT_BASE)
    parser.add_argument("--prefix", default="neuron-torch-host", help="container names: PREFIX-NAME")
    args = parser.parse_args(argv)
    try:
        if args.action == "image":
            print(build_host_image(args.base))
            return 0
        fleet = Fleet(args.dir, args.prefix, args.base)
        for name in args.names:
            host = fleet.start(name)
            print(f"{host.name}: {host.ssh_url} (container {host.container})")
    except HostError as error:
        print(f"hosts: {error}", file=sys.stderr)
        return 1
    print(f"inventory: {fleet.inventory()}; known_hosts: {fleet.known_hosts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
