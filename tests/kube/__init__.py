"""Kubernetes test doubles: an in-process API server (apiserver.py) and a fake kubelet (kubelet.py).

There is no Kubernetes cluster in the test environment: these let kopf run end to end anyway.
"""
