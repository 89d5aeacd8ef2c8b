# Inputs of the neuron-torch images. The cell's facts come from its record (constraints/generated/<cell>.json, read
# with jsondecode(file(var.cell_file))) and what the record does not hold from its rendered variables file
# (images/cells/<cell>.pkrvars.hcl, from constraints/matrix.toml); the build's own settings (region, instance type,
# controller paths) have defaults below.

# ---- Rendered per cell (do not pass by hand: use -var-file=images/cells/<cell>.pkrvars.hcl) ----
# cell_id and cell_file are declared in cell.pkr.hcl (rendered: the supported cells, the record's schema version).
variable "source_ami_name" {
  type        = string
  description = "The exact name of the source AMI (Canonical's), pinned in the matrix; see scripts/refresh-source-ami.sh."
  default     = ""
}

variable "source_ami_owner" {
  type    = string
  default = ""
}

variable "ansible_vars_file" {
  type        = string
  description = "The release vars the playbook reads (neuron_release_vars), rendered from the same matrix."
}

# ---- Build settings ----
variable "lock_file" {
  type        = string
  description = "The hash lock to install, relative to repo_root; empty: the cell record's lock (neuron-torch lock --cell ID writes it)."
  default     = ""
}

variable "repo_root" {
  type        = string
  description = "The neuron-torch checkout (paths above are relative to it). Run packer from it, or set it."
  default     = "."
}

variable "build_dir" {
  type        = string
  description = "Where the manifest and the version-info JSON are written, relative to repo_root."
  default     = "build/packer"
}

variable "region" {
  type    = string
  default = "us-east-1"
}

variable "instance_type" {
  type        = string
  description = "Build instance type. A trn2/trn3 type also runs verify-device on the build instance."
  default     = "m6i.2xlarge"
}

variable "subnet_id" {
  type        = string
  description = "Subnet for the build instance (empty: the default VPC)."
  default     = ""
}

variable "ssh_username" {
  type    = string
  default = "ubuntu"
}

variable "root_volume_size_gb" {
  type        = number
  description = "Size of the build's encrypted gp3 root volume, and so the smallest root volume an instance of the AMI can have (a launch may choose more)."
  default     = 512

  validation {
    condition     = var.root_volume_size_gb >= 512
    error_message = "The root_volume_size_gb must be at least 512 (GB)."
  }
}

# ---- Release identity: the AMI's name, tags, deprecation and SSM parameters (`neuron-torch build ami --dry-run`) ----
variable "ami_name_prefix" {
  type    = string
  default = "neuron-torch"
}

variable "ami_build_number" {
  type        = number
  description = "The Nth build of a cell on one day: 2 and above end the name in -N (AMI names are unique)."
  default     = 1

  validation {
    condition     = var.ami_build_number >= 1 && floor(var.ami_build_number) == var.ami_build_number
    error_message = "The ami_build_number must be a whole number, at least 1."
  }
}

variable "git_sha" {
  type        = string
  description = "The neuron-torch commit the build is made from (neuron-torch build ami passes it; -dirty when edited)."
  default     = "unknown"
}

variable "lock_sha256" {
  type        = string
  description = "The sha256 of the hash lock installed (neuron-torch build ami passes it)."
  default     = "unknown"
}

variable "deprecate_after" {
  type        = string
  description = "How long after the build the AMI is deprecated (deprecate_at), as a duration in hours: 17520h is two years."
  default     = "17520h"

  validation {
    condition     = can(timeadd("2000-01-01T00:00:00Z", var.deprecate_after))
    error_message = "The deprecate_after must be a duration such as 17520h (two years) or 8760h (one year)."
  }
}

variable "ssm_parameter_prefix" {
  type        = string
  description = "SSM parameters name the AMI at <prefix>/<release>/<cell>/image_id (the newest build) and .../recommended/image_id."
  default     = "/neuron-torch"
}

variable "ssm_publish" {
  type        = bool
  description = "Write the SSM parameters after the AMI is made (a post-processor: needs ssm:PutParameter); false: print them only."
  default     = false
}

variable "ssm_recommend" {
  type        = bool
  description = "Also point .../recommended/image_id at this AMI (false: publish it as the newest build, not yet recommended)."
  default     = true
}

variable "docker_repository" {
  type        = string
  description = "The docker source commits its image as <docker_repository>:<cell_id>."
  default     = "neuron-torch-packer"
}

variable "playbook_file" {
  type        = string
  description = "The provisioning playbook (the same one the Ansible route runs), relative to repo_root."
  default     = "ansible/playbooks/provision.yml"
}

variable "ansible_playbook_command" {
  type        = string
  description = "ansible-playbook of the controller venv (Python >= 3.12), relative to repo_root or absolute."
  default     = ".venv-ansible/bin/ansible-playbook"
}

variable "neuron_compile_cache_dir" {
  type        = string
  description = "TorchNeuron's persistent compile cache (TORCH_NEURONX_NEFF_CACHE_DIR) for login shells on the AMI: the shared folder (FSx or EFS mount) every node uses; empty: TorchNeuron's default (/tmp/neff_cache)."
  default     = ""
  validation {
    condition     = var.neuron_compile_cache_dir == "" || substr(var.neuron_compile_cache_dir, 0, 1) == "/"
    error_message = "The neuron_compile_cache_dir must be an absolute path (e.g. /fsx/neff-cache), or empty for TorchNeuron's default."
  }
}

# No type: a value may hold lists and maps (python_env_index_overrides, neuron_verify_extra_args), and Packer 1.6.6
# has no `any`; without a type and with a null default, Packer keeps the value as given (an {} default would drop
# every key given).
variable "ansible_extra_vars" {
  description = "More playbook variables as an object (mirror settings, CA bundle, verify-device arguments); they override the build's."
  default     = null
}

variable "testinfra_python" {
  type        = string
  description = "Python with pytest-testinfra on the controller, relative to repo_root or absolute."
  default     = ".venv-ansible/bin/python"
}

variable "run_testinfra" {
  type        = bool
  description = "Run the shared testinfra suite (smoke_tests/infra) against the build before it is saved."
  default     = true
}

# ---- Sharing and access (safe defaults: private AMI, AWS managed key, SSH only from this controller) ----
variable "kms_key_id" {
  type        = string
  description = "KMS key (ARN or alias) that encrypts the AMI's snapshot; empty: the AWS managed aws/ebs key, which cannot be shared with other accounts. Set a customer managed key to share."
  default     = ""
}

variable "region_kms_key_ids" {
  type        = map(string)
  description = "Region -> KMS key for the copies in ami_regions (required for each region when kms_key_id is set)."
  default     = {}
}

variable "ami_regions" {
  type        = list(string)
  description = "More regions to copy the AMI to (empty: only var.region)."
  default     = []
}

# Optional sharing: each list is checked for its own shape (12-digit account ids; organization ARNs).
variable "ami_users" {
  type        = list(string)
  description = "AWS account ids allowed to launch the AMI (empty: none but the owner). Needs kms_key_id."
  default     = []

  validation {
    condition     = length([for id in var.ami_users : id if length(id) != 12 || trim(id, "0123456789") != ""]) == 0
    error_message = "The ami_users must be 12-digit AWS account ids, such as 123456789012."
  }
}

variable "ami_org_arns" {
  type        = list(string)
  description = "AWS Organizations ARNs allowed to launch the AMI (empty: none). Needs kms_key_id."
  default     = []

  validation {
    condition     = length([for arn in var.ami_org_arns : arn if length(split(":organization/o-", arn)) != 2 || substr(arn, 0, 4) != "arn:"]) == 0
    error_message = "The ami_org_arns must be organization ARNs, such as arn:aws:organizations::123456789012:organization/o-abcd1234ef."
  }
}

variable "ssh_source_cidrs" {
  type        = list(string)
  description = "CIDRs the temporary security group admits to SSH; empty: this controller's public IP only."
  default     = []

  validation {
    condition     = ! contains(var.ssh_source_cidrs, "0.0.0.0/0") && ! contains(var.ssh_source_cidrs, "::/0")
    error_message = "The ssh_source_cidrs must not open the build instance to the internet (0.0.0.0/0, ::/0): name your network's CIDRs, or leave it empty for this controller's public IP."
  }
}
