"""What the controller downloads or hands out before any host changes: which models each host
fetches from the hub or a seed host (weights; the hosts' side is acceldeploy.host.fetch), the fetch
venv's wheels per host kind (fetchlock), and the serving stack's wheels in the controller's
cache (wheelhouse) with the check that they install on each host (wheelcache). Imports
nothing: ``python -m acceldeploy.downloads.<module>`` loads this file first."""
