#!/bin/sh
# The last provisioner of every image build: removes what must not be captured into an AMI (or committed image), the
# way the EKS and ECS AMI builds and image-builder end. Runs as root on the target (POSIX sh). BUILD_USER: the
# login the build used (its authorized_keys go). Checked afterwards by smoke_tests/infra/test_hygiene.py.
set -eu
build_user=${BUILD_USER:-ubuntu}

# machine-id: emptied, not removed. An empty /etc/machine-id makes systemd create a new id on first boot
# (machine-id(5)); every instance launched from the image would otherwise share this one.
: >/etc/machine-id
if [ -f /var/lib/dbus/machine-id ] && [ ! -L /var/lib/dbus/machine-id ]; then rm -f /var/lib/dbus/machine-id; fi

# SSH host keys (made again on first boot by cloud-init or ssh's keygen unit) and the build's authorized key
# (cloud-init installs the launching key pair's on first boot).
rm -f /etc/ssh/ssh_host_*
for home in /root "/home/$build_user"; do
    rm -f "$home/.ssh/authorized_keys"
done

# cloud-init: forget this boot, so that it runs again (host keys, user keys, hostname) on the instance's first boot.
if command -v cloud-init >/dev/null 2>&1; then
    cloud-init clean --logs --seed
fi
rm -rf /var/lib/cloud/instances /var/lib/cloud/instance /var/lib/cloud/data /var/lib/cloud/sem

# Build reports and leftovers of the provisioners: the build-time verify-device report, Ansible's remote temp
# folders, shell histories, caches.
rm -rf /var/lib/neuron-torch/verify-report.json /root/.ansible "/home/$build_user/.ansible" \
    /root/.cache "/home/$build_user/.cache" /root/.bash_history "/home/$build_user/.bash_history"
if command -v apt-get >/dev/null 2>&1; then apt-get clean; fi
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
# /tmp and /var/tmp, dot entries too (systemd-tmpfiles makes /tmp/.X11-unix and the like again at boot).
find /tmp /var/tmp -mindepth 1 -delete

# Logs: rotated files and the journal go; live log files are emptied (their owners and modes stay). The syslog daemon
# is stopped first (it starts again on the instance's first boot, being enabled): the AMI build checks the final state
# over SSH with sudo, and every sudo call would otherwise be written into the emptied /var/log/auth.log and captured.
# journald is asked to write on to /run/log/journal (tmpfs, never captured) instead of /var/log/journal: its own
# shutdown step (journalctl --relinquish-var, systemd >= 243), undone by the flush at the instance's first boot. Without
# it, a journal file journald opens after this point (a user's first message: user-1000.journal) is captured.
if [ -d /run/systemd/system ]; then
    systemctl stop syslog.socket rsyslog.service 2>/dev/null || true
    journalctl --relinquish-var 2>/dev/null || true
fi
find /var/log -type f \( -name '*.gz' -o -name '*.[0-9]' -o -name '*.old' \) -delete
rm -rf /var/log/journal/*
find /var/log -type f -exec truncate -s 0 {} +
echo "cleanup: machine-id emptied; host keys, authorized keys, cloud-init state, reports, caches and logs removed"
