# The AMI source: Canonical's exact image for the cell's Ubuntu release (24.04 or 26.04), pinned per cell in
# images/cells/<cell>.pkrvars.hcl from matrix.toml (os.<id>.source_ami_name; refresh: scripts/refresh-source-ami.sh).

source "amazon-ebs" "ubuntu" {
  region        = var.region
  instance_type = var.instance_type
  subnet_id     = var.subnet_id == "" ? null : var.subnet_id
  ssh_username  = var.ssh_username

  # The exact Canonical image pinned in the matrix (os.<id>.source_ami_name): one match or the build fails.
  source_ami_filter {
    filters = {
      name                = var.source_ami_name
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [var.source_ami_owner]
    most_recent = false
  }

  # IMDSv2 only, on the build instance. Packer 1.6.6 has no metadata_options: the lines between the markers need
  # Packer >= 1.7 with the amazon plugin (images/plugins/); neuron_torch.packer leaves them out only to *validate*
  # with 1.6.6, and refuses amazon-ebs builds there. The imds-check provisioner also fails any build that answers IMDSv1.
  # BEGIN packer>=1.7
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }
  # END packer>=1.7

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_size_gb
    volume_type           = "gp3"
    iops                  = 3000
    throughput            = 125
    encrypted             = true
    delete_on_termination = true
  }
  encrypt_boot = true

  ami_name        = local.ami_name
  ami_description = "neuron-torch ${var.cell_id} (${var.release}; torch-neuronx ${var.pins["torch-neuronx"]}, torch ${var.pins["torch"]}) on ${var.os_id}"
  tags            = local.tags
  snapshot_tags   = local.tags
  run_tags        = { Name = "packer ${local.ami_name}", "neuron-torch:cell" = var.cell_id }
}
