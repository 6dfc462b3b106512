"""The offline bundle: everything an inventory needs to deploy with no route out, collected
once where the internet is reachable (build), checked (verify, and preflight), compared
(diff), and served read-only by the controller to the hosts (server).

A bundle directory holds ``bundle.json`` (the manifest: every file, its size, sha256, source
and the host classes that need it), ``wheels/`` (the serving stacks' and the hub clients'
wheels of every host class, one flat pip find-links directory), ``controller/`` (the
controller's own toolchain wheels) and ``models/`` (each service's model at its pinned
revision, published as the hosts publish them, with the hub's hashes).
"""
