"""Taking a service, a model revision or a host back out of the fleet (playbooks/remove.yml)."""
