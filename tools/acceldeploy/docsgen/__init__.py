"""The generated parts of the docs, from the one place each fact lives: every role README's
variables and platforms blocks and its meta/main.yml Galaxy platforms (roledocs, rolemeta:
from meta/argument_specs.yml and data/targets.yml) and the inventory reference's service keys
(from acceldeploy.serving.service), and the package's data taken from the roles (packagedata:
data/role-defaults.yml). ``python -m acceldeploy.docsgen.roledocs --write`` regenerates them,
``--check`` names each stale file. Imports nothing."""
