"""Everything acceldeploy runs on a host, in one place.

- ``fetch``: the model download the module model_weights_fetch runs (``python -m
  acceldeploy.host.fetch check`` on a mounted models root), and the serving environment's
  copy from a peer (python_env_fanout);
- ``state``: the no-op path's record and comparison (acceldeploy_state), the pruning of old
  builds and revisions (acceldeploy_prune), the line ``--check --diff`` prints per service;
- ``readiness``: a multi-node group's readiness gate (acceldeploy_group_gate): the node's NIC,
  address, ports and dials (``gate``, through ``procnet``, the one reader of the host's TCP
  sockets and the one peer dial), an Ascend node's NPU network (``hccn``), a Gaudi node's
  external ports (``hlports``);
- ``unitmemory``: the memory of each vLLM unit, for node exporter's textfile collector;
- ``helpers/``: the scripts the roles install on a host (vLLM's ExecStop drain, the DP watch,
  the readiness and Ray waits, the unit check, HAProxy's state save), shipped by the roles
  through the symlinks in ``roles/*/files``.

The modules (plugins/modules) are the thin Ansible adapters over it; Ansible ships the code
they import. All of it runs on the oldest Python a host may have (3.9) with the standard library
only: tests/unit/test_host_side_code.py holds it. It imports nothing of acceldeploy but its
errors and model references.
"""
