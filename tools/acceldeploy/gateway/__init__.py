"""The gateway: one HAProxy endpoint per model in front of every host that serves it
(roles/gateway). ``plan`` decides the frontends, servers, checks and weights from the
inventory and refuses a misconfiguration by variable name; the role's template prints them.
"""
