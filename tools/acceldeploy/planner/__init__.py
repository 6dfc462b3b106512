"""What a service needs, decided on the controller before anything runs: the platform (its
accelerator profile and pinned stack), the model's geometry, the KV cache arithmetic, the
engine's options, the model catalog, and the memory budget read back from a start-up log.
Imports nothing: ``acceldeploy.planner.stacks`` is imported alone by the tools that only read
versions/stacks.yml."""
