"""braid: collective communication for Python.

Placeholder for the torch backend's branch: the numpy binding's package
replaces this file. ``import braid`` stays free of torch; ``import
braid.torch`` loads torch and registers the "braid" torch.distributed backend.
"""
