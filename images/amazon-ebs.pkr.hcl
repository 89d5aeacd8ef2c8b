# The AMI source: Canonical's exact image for the cell's Ubuntu release (24.04 or 26.04), pinned per cell in
# images/cells/<cell>.pkrvars.hcl from matrix.toml (os.<id>.source_ami_name; refresh: scripts/refresh-source-ami.sh).

source "amazon-ebs" "ubuntu" {
  region        = var.region
  instance_type = var.instance_type
  subnet_id     = var.subnet_id == "" ? null : var.subnet_id
  ssh_username  = var.ssh_username
  # Packer removes its temporary key from authorized_keys at the end too (the cleanup provisioner already did).
  ssh_clear_authorized_keys = true

  # The temporary security group admits SSH only from these CIDRs; empty: from this controller's public IP only
  # (temporary_security_group_source_public_ip below). Never 0.0.0.0/0 by default.
  temporary_security_group_source_cidrs = length(var.ssh_source_cidrs) > 0 ? var.ssh_source_cidrs : null

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
  # Instances launched from the AMI require IMDSv2 too.
  imds_support                              = "v2.0"
  temporary_security_group_source_public_ip = length(var.ssh_source_cidrs) == 0
  ami_org_arns                              = var.ami_org_arns
  # Deprecated deprecate_after (two years by default) after the build, as AWS deprecates its public AMIs.
  deprecate_at = local.deprecate_at
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
  # A customer managed key lets other accounts launch the AMI (the AWS managed aws/ebs key cannot be shared); with
  # ami_regions, region_kms_key_ids names the key to use in each region.
  kms_key_id         = var.kms_key_id == "" ? null : var.kms_key_id
  ami_regions        = var.ami_regions
  region_kms_key_ids = var.region_kms_key_ids
  ami_users          = var.ami_users

  ami_name        = local.ami_name
  ami_description = "neuron-torch ${var.cell_id} (${local.cell.release}; torch-neuronx ${local.cell.torch_neuronx}, torch ${local.cell.torch}) on ${local.cell.os}"
  tags            = local.tags
  snapshot_tags   = local.tags
  run_tags        = { Name = "packer ${local.ami_name}", "neuron-torch:cell" = var.cell_id }
}
