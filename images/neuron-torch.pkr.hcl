# neuron-torch golden images: one cell of the matrix per build.
#   amazon-ebs.ubuntu: an AMI from Canonical's exact source AMI (Ubuntu 24.04 or 26.04, per the cell's os)
#   docker.local:      the same provisioning in a local container, committed as neuron-torch-packer:<cell>
# packer build -var-file=images/cells/<cell>.pkrvars.hcl -only=docker.local images/   (see images/README.md)

locals {
  # The cell's facts, from its versioned record (cell.pkr.hcl refuses a record of another schema version).
  cell = jsondecode(file(abspath(var.cell_file)))
  # The direct pip pins (a release without neuronx-cc or nki has null there) and every Neuron apt pin.
  pins = { for name, version in {
    "torch-neuronx" = local.cell.torch_neuronx
    "torch"         = local.cell.torch
    "neuronx-cc"    = local.cell.neuronx_cc
    "nki"           = local.cell.nki
  } : name => version if version != null }
  apt_pins  = merge(local.cell.apt_host, local.cell.apt)
  lock_file = var.lock_file != "" ? var.lock_file : local.cell.lock

  build_dir = "${var.repo_root}/${var.build_dir}/${var.cell_id}"
  timestamp = formatdate("YYYYMMDDhhmmss", timestamp())
  ami_name  = "${var.ami_name_prefix}-${var.cell_id}-${local.cell.release}-${local.timestamp}"
  labels = merge(
    {
      "neuron-torch.cell"       = var.cell_id
      "neuron-torch.release"    = local.cell.release
      "neuron-torch.os"         = local.cell.os
      "neuron-torch.python"     = local.cell.python
      "neuron-torch.base-image" = local.cell.base_image
    },
    { for name, version in local.pins : "neuron-torch.pin.${name}" => version },
    { for name, version in local.apt_pins : "neuron-torch.apt.${name}" => version },
  )
  tags = merge(
    {
      Name                      = local.ami_name
      "neuron-torch:cell"       = var.cell_id
      "neuron-torch:release"    = local.cell.release
      "neuron-torch:os"         = local.cell.os
      "neuron-torch:python"     = local.cell.python
      "neuron-torch:source-ami" = var.source_ami_name
    },
    { for name, version in local.pins : "neuron-torch:pin:${name}" => version },
    { for name, version in local.apt_pins : "neuron-torch:apt:${name}" => version },
  )
  playbook_vars = merge(
    {
      neuron_cell         = var.cell_id
      neuron_lock_file    = abspath("${var.repo_root}/${local.lock_file}")
      neuron_release_vars = abspath("${var.repo_root}/${var.ansible_vars_file}")
      neuron_repo_root    = abspath(var.repo_root)
    },
    var.ansible_extra_vars,
  )
}

source "docker" "local" {
  image  = local.cell.base_image
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

  # Canonical's AMIs start with python3 (cloud-init's) and sudo (tests/testbed/traits.toml [ami.python3], [ami.sudo]);
  # the ubuntu container images the docker source starts from have neither ([container.no_python3]), and Ansible needs
  # python3 on its target. Give the container what an AMI starts with, and nothing more (apt lists go in the cleanup).
  provisioner "shell" {
    only = ["docker.local"]
    inline = [
      "if [ -x /usr/bin/python3 ] && [ -x /usr/bin/sudo ]; then echo 'python3 and sudo: present'; exit 0; fi",
      "apt-get update -qq",
      "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 sudo >/dev/null",
      "echo 'python3 and sudo: installed, as an Ubuntu AMI has them'",
    ]
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
      "CELL_FILE=${abspath(var.cell_file)}",
      "LOCK_FILE=${abspath("${var.repo_root}/${local.lock_file}")}",
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
      "CELL_FILE=${abspath(var.cell_file)}",
      "LOCK_FILE=${abspath("${var.repo_root}/${local.lock_file}")}",
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
      "CELL_FILE=${abspath(var.cell_file)}",
      "LOCK_FILE=${abspath("${var.repo_root}/${local.lock_file}")}",
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
      release      = local.cell.release
      version_info = "${var.build_dir}/${var.cell_id}/version-info.json"
    }
  }
}
