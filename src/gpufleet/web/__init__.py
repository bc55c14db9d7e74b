"""The web dashboard (``gpufleet dashboard``): a service layer over the snapshot, the engine's
explanations and the usage ledger (docs/dashboard.md).

This branch holds only its access rules (:mod:`gpufleet.web.access`) and the Kubernetes
authentication (:mod:`gpufleet.web.auth`); the application (``create_app``) is merged beside them.
"""
