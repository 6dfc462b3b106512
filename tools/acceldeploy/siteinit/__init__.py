"""`acceldeploy init`: a site's first inventory from its hosts (probe.py reads them, draft.py
decides, write.py prints the skeletons)."""
