"""What a deploy left on a host, and what a rerun does about it: the no-op path's record and
its comparison (drift), which old environment builds and model revisions may go (prune), and
what a service would switch to (switch).

drift and prune run on the hosts too, inside the acceldeploy_state and acceldeploy_prune
modules (the collection's module_utils), which ship this file with them: it imports
nothing, and those two keep to the standard library and Python 3.9."""
