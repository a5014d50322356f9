"""Coordination: which worker polls which shard, and who leads each shard.

The contract (:mod:`.base`) and the pure assignment math sit beside the
ZooKeeper implementation; the worker and the API see only the contract.
"""
