"""What each host serves, decided on the controller: a service from the inventory (service),
its argv and env (render, with Gaudi's bucketing, recipe cache, NUMA and container in
gaudi_launch), its systemd unit and launcher (unit), the services that span hosts (cluster,
each node's Ray unit in raynode), the one plan per host (hostplan) and the hosts bench and
tune act on (selection). Imports nothing."""
