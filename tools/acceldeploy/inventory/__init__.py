"""The inventory, read and checked on the controller before any host is contacted: Ansible's
data as plain Python (ansible_adapter), a host's variables the way a play sees them
(hostvars), the roles' documented defaults (roledefaults), and preflight's checks: the
variables against the roles' argument specs (varcheck), the day-2 numbers' bounds (bounds)
and the hosts' operating systems at first contact (targets). Imports nothing."""
