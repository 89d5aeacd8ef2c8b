# Plugins for current Packer (>= 1.7). Kept out of images/ because Packer 1.6.6 (which CI validates with) has no
# required_plugins. Install them once, then build images/ as usual:
#   packer init images/plugins
packer {
  required_version = ">= 1.7.0"
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.2.0"
    }
    ansible = {
      source  = "github.com/hashicorp/ansible"
      version = ">= 1.1.0"
    }
    docker = {
      source  = "github.com/hashicorp/docker"
      version = ">= 1.0.8"
    }
  }
}
