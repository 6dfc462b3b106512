"""What acceldeploy bench runs on the serving host, in the service's own Python env: the driver
and the conversations it replays (shipped as files beside each other, with ``unitmemory``)."""
