# neuron-torch golden images: one cell of the matrix per build.
#   amazon-ebs.ubuntu: an AMI from Canonical's exact source AMI (Ubuntu 24.04 or 26.04, per the cell's os)
#   docker.local:      the same provisioning in a local container, committed as neuron-torch-packer:<cell>
# packer build -var-file=images/cells/<cell>.pkrvars.hcl -only=docker.local images/   (see images/README.md)

locals {
  build_dir = "${var.repo_root}/${var.build_dir}/${var.cell_id}"
  timestamp = formatdate("YYYYMMDDhhmmss", timestamp())
  ami_name  = "${var.ami_name_prefix}-${var.cell_id}-${var.release}-${local.timestamp}"
  labels = merge(
    {
      "neuron-torch.cell"       = var.cell_id
      "neuron-torch.release"    = var.release
      "neuron-torch.os"         = var.os_id
      "neuron-torch.python"     = var.python
      "neuron-torch.base-image" = var.base_image
    },
    { for name, version in var.pins : "neuron-torch.pin.${name}" => version },
    { for name, version in var.apt_pins : "neuron-torch.apt.${name}" => version },
  )
  tags = merge(
    {
      Name                      = local.ami_name
      "neuron-torch:cell"       = var.cell_id
      "neuron-torch:release"    = var.release
      "neuron-torch:os"         = var.os_id
      "neuron-torch:python"     = var.python
      "neuron-torch:source-ami" = var.source_ami_name
    },
    { for name, version in var.pins : "neuron-torch:pin:${name}" => version },
    { for name, version in var.apt_pins : "neuron-torch:apt:${name}" => version },
  )
  playbook_vars = merge(
    {
      neuron_cell         = var.cell_id
      neuron_release_vars = abspath("${var.repo_root}/${var.ansible_vars_file}")
      neuron_repo_root    = abspath(var.repo_root)
    },
    var.ansible_extra_vars,
  )
}

source "docker" "local" {
  image  = var.base_image
  pull   = false
  commit = true
  # Host networking: the build reaches the loopback mirrors (the test bed serves on 127.0.0.1).
  run_command = ["-d", "-i", "-t", "--network=host", "--entrypoint=/bin/sh", "--", "{{.Image}}"]
  changes = concat(
    [
      "ENV PATH=/opt/neuron-torch/venv/bin:/opt/aws/neuron/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "ENV LD_LIBRARY_PATH=/opt/aws/neuron/lib",
    ],
    [for key, value in local.labels : "LABEL \"${key}\"=\"${value}\""],
  )
}

build {
  sources = ["source.amazon-ebs.ubuntu", "source.docker.local"]

  # IMDSv2 must be enforced: a token-less metadata request has to be refused (401) on the build instance.
  provisioner "shell" {
    only   = ["amazon-ebs.ubuntu"]
    script = "${var.repo_root}/images/scripts/imds-check.sh"
  }

  # The Ansible route's playbook, unchanged: the same provisioning on an AMI, a host and this container.
  provisioner "ansible" {
    command       = var.ansible_playbook_command
    playbook_file = "${var.repo_root}/${var.playbook_file}"
    user          = build.User
    extra_arguments = [
      "--extra-vars", jsonencode(local.playbook_vars),
    ]
    # Packer's SSH proxy offers only ssh-rsa keys and no SFTP server: allow the former, pipe files over exec.
    ansible_env_vars = [
      "ANSIBLE_CONFIG=${abspath(var.repo_root)}/ansible/ansible.cfg",
      "ANSIBLE_HOST_KEY_CHECKING=False",
      "ANSIBLE_SSH_TRANSFER_METHOD=piped",
      "ANSIBLE_PIPELINING=True",
      "ANSIBLE_SSH_ARGS=-o ControlMaster=no -o HostKeyAlgorithms=+ssh-rsa -o PubkeyAcceptedAlgorithms=+ssh-rsa",
    ]
  }

  # What is installed, as data: /etc/neuron-torch/version-info.json, kept as a build artifact below.
  provisioner "shell" {
    only            = ["docker.local"]
    script          = "${var.repo_root}/images/scripts/version-info.sh"
    execute_command = "chmod +x {{ .Path }}; {{ .Vars }} {{ .Path }}"
  }

  provisioner "shell" {
    only            = ["amazon-ebs.ubuntu"]
    script          = "${var.repo_root}/images/scripts/version-info.sh"
    execute_command = "chmod +x {{ .Path }}; sudo -E {{ .Vars }} {{ .Path }}"
  }

  provisioner "file" {
    direction   = "download"
    source      = "/etc/neuron-torch/version-info.json"
    destination = "${local.build_dir}/version-info.json"
  }

  # The shared testinfra suite against the build instance over SSH, host-key checking on: the instance's host key,
  # read through Packer's own session, is the only key testinfra.sh trusts. The run keeps its SSH master connection
  # open, so that the suite can run again on the final state after the cleanup (below).
  provisioner "file" {
    only        = ["amazon-ebs.ubuntu"]
    direction   = "download"
    source      = "/etc/ssh/ssh_host_ed25519_key.pub"
    destination = "${local.build_dir}/ssh_host_ed25519_key.pub"
  }

  provisioner "shell-local" {
    only = ["amazon-ebs.ubuntu"]
    environment_vars = [
      "TESTINFRA_HOST_KEY_FILE=${local.build_dir}/ssh_host_ed25519_key.pub",
      "RUN_TESTINFRA=${var.run_testinfra}",
      "TESTINFRA_PYTHON=${var.testinfra_python}",
      "TESTINFRA_HOSTS=ssh://${build.User}@${build.Host}:${build.Port}",
      "TESTINFRA_SSH_KEY=${build.SSHPrivateKey}",
      "TESTINFRA_TARGET=host",
      "TESTINFRA_SSH_MASTER=keep",
      "TESTINFRA_JUNIT=testinfra-before-cleanup.xml",
      "CELL_FILE=${var.repo_root}/${var.cell_file}",
      "LOCK_FILE=${var.repo_root}/${var.lock_file}",
      "REPORT_DIR=${local.build_dir}",
    ]
    script = "${var.repo_root}/images/scripts/testinfra.sh"
  }

  # verify-device on the build instance when it has a Neuron device, with the venv's Python (sudo resets the
  # environment: without NEURON_TORCH_PYTHON it would fall back to the system python3, which has no torch).
  provisioner "shell" {
    only = ["amazon-ebs.ubuntu"]
    inline = [
      "if ls /dev/neuron* >/dev/null 2>&1; then sudo NEURON_TORCH_PYTHON=/opt/neuron-torch/venv/bin/python PATH=/opt/aws/neuron/bin:/opt/neuron-torch/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LD_LIBRARY_PATH=/opt/aws/neuron/lib /usr/local/bin/verify-device --device neuron; else echo 'verify-device: skipped, no Neuron device on this ${var.instance_type} build instance'; fi",
    ]
  }

  # Last: what must not be captured goes (machine-id, host keys, the build's authorized key, cloud-init state, logs,
  # caches, build reports). Nothing may run on the target after this.
  provisioner "shell" {
    only             = ["docker.local"]
    script           = "${var.repo_root}/images/scripts/cleanup.sh"
    environment_vars = ["BUILD_USER=${var.ssh_username}"]
    execute_command  = "chmod +x {{ .Path }}; {{ .Vars }} {{ .Path }}"
  }

  provisioner "shell" {
    only             = ["amazon-ebs.ubuntu"]
    script           = "${var.repo_root}/images/scripts/cleanup.sh"
    environment_vars = ["BUILD_USER=${build.User}"]
    execute_command  = "chmod +x {{ .Path }}; sudo -E {{ .Vars }} {{ .Path }}"
  }

  # The shared testinfra suite on the final state of both sources, hygiene checks included (--captured). docker exec
  # needs no key; the AMI's run goes over the SSH master connection opened by the run before the cleanup (the cleanup
  # removed the key and host keys a new connection would need, not the connection) and closes it.
  provisioner "shell-local" {
    only = ["amazon-ebs.ubuntu"]
    environment_vars = [
      "TESTINFRA_HOST_KEY_FILE=${local.build_dir}/ssh_host_ed25519_key.pub",
      "RUN_TESTINFRA=${var.run_testinfra}",
      "TESTINFRA_PYTHON=${var.testinfra_python}",
      "TESTINFRA_HOSTS=ssh://${build.User}@${build.Host}:${build.Port}",
      "TESTINFRA_SSH_KEY=${build.SSHPrivateKey}",
      "TESTINFRA_TARGET=host",
      "TESTINFRA_SSH_MASTER=reuse",
      "TESTINFRA_CAPTURED=true",
      "CELL_FILE=${var.repo_root}/${var.cell_file}",
      "LOCK_FILE=${var.repo_root}/${var.lock_file}",
      "REPORT_DIR=${local.build_dir}",
    ]
    script = "${var.repo_root}/images/scripts/testinfra.sh"
  }

  provisioner "shell-local" {
    only = ["docker.local"]
    environment_vars = [
      "RUN_TESTINFRA=${var.run_testinfra}",
      "TESTINFRA_PYTHON=${var.testinfra_python}",
      "TESTINFRA_HOSTS=docker://${build.ID}",
      # Ansible provisioned this container exactly as it provisions an AMI: it is checked as a host.
      "TESTINFRA_TARGET=host",
      "TESTINFRA_CAPTURED=true",
      "CELL_FILE=${var.repo_root}/${var.cell_file}",
      "LOCK_FILE=${var.repo_root}/${var.lock_file}",
      "REPORT_DIR=${local.build_dir}",
    ]
    script = "${var.repo_root}/images/scripts/testinfra.sh"
  }

  post-processor "docker-tag" {
    only       = ["docker.local"]
    repository = var.docker_repository
    tags       = [var.cell_id]
  }

  post-processor "manifest" {
    output     = "${local.build_dir}/manifest.json"
    strip_path = true
    custom_data = {
      cell         = var.cell_id
      release      = var.release
      version_info = "${var.build_dir}/${var.cell_id}/version-info.json"
    }
  }
}
