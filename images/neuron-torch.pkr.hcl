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
  lock_path = abspath("${var.repo_root}/${local.lock_file}")

  build_dir = "${var.repo_root}/${var.build_dir}/${var.cell_id}"
  # The release identity of an AMI: neuron-torch-<release>-<cell>-<YYYYMMDD>[-N], deprecated deprecate_after later,
  # found through SSM at <prefix>/<release>/<cell>/image_id (the newest) and .../recommended/image_id.
  built_at     = timestamp()
  ami_name     = "${var.ami_name_prefix}-${local.cell.release}-${var.cell_id}-${formatdate("YYYYMMDD", local.built_at)}${var.ami_build_number > 1 ? "-${var.ami_build_number}" : ""}"
  deprecate_at = timeadd(local.built_at, var.deprecate_after)
  ssm_path     = "${var.ssm_parameter_prefix}/${local.cell.release}/${var.cell_id}"
  ssm_parameters = concat(
    ["${local.ssm_path}/image_id"],
    var.ssm_recommend ? ["${local.ssm_path}/recommended/image_id"] : [],
  )
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
      Name                       = local.ami_name
      "neuron-torch:cell"        = var.cell_id
      "neuron-torch:release"     = local.cell.release
      "neuron-torch:os"          = local.cell.os
      "neuron-torch:python"      = local.cell.python
      "neuron-torch:source-ami"  = var.source_ami_name
      "neuron-torch:git-sha"     = var.git_sha
      "neuron-torch:lock-sha256" = var.lock_sha256
    },
    { for name, version in local.pins : "neuron-torch:pin:${name}" => version },
    { for name, version in local.apt_pins : "neuron-torch:apt:${name}" => version },
  )
  playbook_vars = merge(
    {
      neuron_cell              = var.cell_id
      neuron_compile_cache_dir = var.neuron_compile_cache_dir
      neuron_lock_file         = local.lock_path
      neuron_release_vars      = abspath("${var.repo_root}/${var.ansible_vars_file}")
      neuron_repo_root         = abspath(var.repo_root)
    },
    var.ansible_extra_vars,
  )

  # What the two sources do differently, as data keyed by source type: each provisioner below is written once and
  # takes its source's entry (local.as_root[source.type]). The AMI's login user is not root: scripts on the target
  # run under sudo -E (which keeps their environment_vars); in the container they already run as root.
  as_root = {
    "amazon-ebs" = "sudo -E "
    docker       = ""
  }
  # The testinfra suite's settings for every run; each run adds its target and phase. Ansible provisioned the
  # container exactly as it provisions an AMI: both are checked as a host.
  testinfra_env = [
    "RUN_TESTINFRA=${var.run_testinfra}",
    "TESTINFRA_PYTHON=${var.testinfra_python}",
    "TESTINFRA_TARGET=host",
    "CELL_FILE=${abspath(var.cell_file)}",
    "LOCK_FILE=${local.lock_path}",
    "REPORT_DIR=${local.build_dir}",
  ]
  # Over SSH the only host key testinfra.sh trusts: the instance's, downloaded through Packer's own session.
  testinfra_host_key = "TESTINFRA_HOST_KEY_FILE=${local.build_dir}/ssh_host_ed25519_key.pub"
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

  # What is installed, as data: the bill of materials in /etc/neuron-torch/bom (version-info.json, the CycloneDX
  # SBOMs of the venv and the apt packages, SHA256SUMS), by the generator the image build runs; each file is kept as
  # a build artifact below (the docker communicator downloads files, not folders).
  provisioner "shell" {
    script          = "${var.repo_root}/images/scripts/bom.sh"
    execute_command = "chmod +x {{ .Path }}; ${local.as_root[source.type]}{{ .Vars }} {{ .Path }}"
  }

  provisioner "file" {
    direction   = "download"
    source      = "/etc/neuron-torch/bom/version-info.json"
    destination = "${local.build_dir}/version-info.json"
  }

  provisioner "file" {
    direction   = "download"
    source      = "/etc/neuron-torch/bom/sbom-venv.cdx.json"
    destination = "${local.build_dir}/sbom-venv.cdx.json"
  }

  provisioner "file" {
    direction   = "download"
    source      = "/etc/neuron-torch/bom/sbom-apt.cdx.json"
    destination = "${local.build_dir}/sbom-apt.cdx.json"
  }

  provisioner "file" {
    direction   = "download"
    source      = "/etc/neuron-torch/bom/SHA256SUMS"
    destination = "${local.build_dir}/SHA256SUMS"
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
    environment_vars = concat(local.testinfra_env, [
      "TESTINFRA_HOSTS=ssh://${build.User}@${build.Host}:${build.Port}",
      "TESTINFRA_SSH_KEY=${build.SSHPrivateKey}",
      local.testinfra_host_key,
      "TESTINFRA_SSH_MASTER=keep",
      "TESTINFRA_JUNIT=testinfra-before-cleanup.xml",
    ])
    script = "${var.repo_root}/images/scripts/testinfra.sh"
  }

  # verify-device on the build instance when it has a Neuron device (the script says how it is run, and why).
  provisioner "shell" {
    only             = ["amazon-ebs.ubuntu"]
    script           = "${var.repo_root}/images/scripts/verify-on-device.sh"
    environment_vars = ["INSTANCE_TYPE=${var.instance_type}"]
  }

  # Last: what must not be captured goes (machine-id, host keys, the build's authorized key, cloud-init state, logs,
  # caches, build reports). Nothing may run on the target after this. BUILD_USER: the login whose authorized_keys,
  # caches and history go: the AMI's SSH user; in the container, var.ssh_username (the name an AMI's login has).
  provisioner "shell" {
    script = "${var.repo_root}/images/scripts/cleanup.sh"
    environment_vars = {
      "amazon-ebs" = ["BUILD_USER=${build.User}"]
      docker       = ["BUILD_USER=${var.ssh_username}"]
    }[source.type]
    execute_command = "chmod +x {{ .Path }}; ${local.as_root[source.type]}{{ .Vars }} {{ .Path }}"
  }

  # The shared testinfra suite on the final state of both sources, hygiene checks included (--captured).
  provisioner "shell-local" {
    environment_vars = concat(local.testinfra_env, ["TESTINFRA_CAPTURED=true"], {
      # Over the SSH master connection opened by the run before the cleanup (the cleanup removed the key and host
      # keys a new connection would need, not the connection), which this run closes.
      "amazon-ebs" = [
        "TESTINFRA_HOSTS=ssh://${build.User}@${build.Host}:${build.Port}",
        "TESTINFRA_SSH_KEY=${build.SSHPrivateKey}",
        local.testinfra_host_key,
        "TESTINFRA_SSH_MASTER=reuse",
      ]
      # docker exec needs no key.
      docker = ["TESTINFRA_HOSTS=docker://${build.ID}"]
    }[source.type])
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
      cell           = var.cell_id
      release        = local.cell.release
      version_info   = "${var.build_dir}/${var.cell_id}/version-info.json"
      ami_name       = local.ami_name
      deprecate_at   = local.deprecate_at
      ssm_parameters = join(" ", local.ssm_parameters)
    }
  }

  # The SSM parameters (after the manifest, which holds the AMI id of each region): written when ssm_publish is
  # true, printed otherwise.
  post-processor "shell-local" {
    only = ["amazon-ebs.ubuntu"]
    environment_vars = [
      "MANIFEST=${local.build_dir}/manifest.json",
      "SSM_PARAMETERS=${join(" ", local.ssm_parameters)}",
      "SSM_PUBLISH=${var.ssm_publish}",
    ]
    script = "${var.repo_root}/images/scripts/ssm-publish.sh"
  }
}
