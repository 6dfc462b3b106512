"""Watching the fleet from the controller: `acceldeploy top` (and the report), read from the
monitor's Prometheus or the services' own /metrics."""
