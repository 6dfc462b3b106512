"""Post-deploy checks for a fleet: host state over SSH, each service's API, a memory probe."""
