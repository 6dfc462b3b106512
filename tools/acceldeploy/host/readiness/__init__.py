"""A multi-node group's readiness gate, judged: what one node reports before its group starts
or restarts (gate: its NIC, address, ports and dials; hccn: an Ascend node's NPU network).
Host-side code (the module acceldeploy_group_gate ships it): standard library and relative
imports only, and this file imports nothing."""
