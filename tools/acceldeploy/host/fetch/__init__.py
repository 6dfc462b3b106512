"""Model weights on a host: plan, download, verify, publish atomically, fan out from a seed.

This package runs on the hosts. It is never copied there as files: Ansible zips what the module
plugins/modules/model_weights_fetch.py imports of it (and what that imports, relatively) into
the module's payload, from the collection's module_utils (plugins/module_utils/acceldeploy, a
link to this package; docs/developers/collection.md). So every file here imports only the standard
library and its siblings (relative imports; ``...errors`` and ``...modelref`` above), imports
huggingface_hub and modelscope lazily where it uses them (the fetch venv has them), and keeps
to Python 3.9 (host/ruff.toml). The controller imports the same files as ``acceldeploy.host.fetch``.

On a host, for a models root R and a model ``org/name`` at revision ``rev``:

    R/org/name@rev/                            the published model (what vLLM reads)
    R/org/name@rev/.acceldeploy-manifest.json  stamp and hub hash of every file
    R/.acceldeploy/staging/org/name@rev/       downloads in progress (kept for resume)
    R/.acceldeploy/progress/org/name@rev.json  progress of the running download
    R/.acceldeploy/locks/                      one flock per model
    R/.acceldeploy/run/                        the seed server's pid file and log

A later run re-hashes nothing whose stamp (size, mtime, ctime, inode) matches the manifest
(``verify: fast``);
``verify: full`` re-hashes every file.

- ``common``: the model spec, hub listings, hashes, the on-disk layout;
- ``manifest``: the manifest and the published copy checked against it;
- ``plan``: what one model needs on this host, and whether it all fits;
- ``publish``: locks, staging, verification, the atomic publish;
- ``progress``: the progress file and log an operator watches;
- ``hub``: listings and downloads through the hubs' own clients;
- ``seed``: the seed host's HTTP server and the pulls from it;
- ``run``: what the module calls (``request_from_params``, ``plan_host``, ``run``).
"""
