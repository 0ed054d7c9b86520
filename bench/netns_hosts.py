"""Two hosts on one machine for the benchmarks: two network namespaces joined
by a veth pair (tests/netns/veth_pair.py), each process in them under a host
name of its own (a UTS namespace), the pair optionally shaped with tc tbf.

    with TwoHosts(shape="1gbit") as hosts:      # shape "" or None: unshaped
        subprocess.run(hosts.prefix(0) + ["braid-run", ...])

Host k is 10.213.1.(k+1) in namespace braid-bench-<pid>-<k>, named
bench-host-<k>. Traffic stays inside the two namespaces; they are deleted on
exit (and those of an earlier run that was killed, before new ones are made).
Needs root, ip, tc and unshare: NamespacesUnavailable says why not.
"""

import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "netns"))
from veth_pair import NamespacesUnavailable, VethPair, in_namespace, require_tools, shape_link  # noqa: E402

ADDR = ("10.213.1.1", "10.213.1.2")
HOSTNAME = ("bench-host-0", "bench-host-1")


class TwoHosts(VethPair):
    def __init__(self, shape=None):
        pid = os.getpid()
        super().__init__(ns=(f"braid-bench-{pid}-0", f"braid-bench-{pid}-1"), dev=(f"bnb{pid}a", f"bnb{pid}b"),
                         addr=ADDR, stale=re.compile(r"braid-bench-(\d+)-[01]"))
        self.shape = shape or ""

    def __enter__(self):
        if os.geteuid() != 0:
            raise NamespacesUnavailable("needs root to create network namespaces")
        require_tools("tc", "unshare", "hostname")
        super().__enter__()
        if self.shape:
            try:
                for ns, dev in zip(self.ns, self.dev):
                    shape_link(ns, dev, self.shape)
            except BaseException:
                self.__exit__(None, None, None)
                raise
        return self

    def prefix(self, host):
        """A command on host `host` (0 or 1): in its namespace, under its own host name."""
        return in_namespace(self.ns[host], HOSTNAME[host])

    def own_cpus(self, host, ranks_per_host):
        """A prefix that gives host `host` its own half of this process's CPUs
        (taskset -c), as two machines would have, when each host's ranks fit
        in its half; [] otherwise (the hosts then share every CPU). Without
        it each host's braid-run binds its ranks from the first CPU, so the
        ranks of both hosts would pile onto the same CPUs (2x1 on 2 CPUs: both
        on CPU 0, the other idle)."""
        cpus = sorted(os.sched_getaffinity(0))
        half = len(cpus) // 2
        if ranks_per_host < 1 or ranks_per_host > half:
            return []
        mine = cpus[host * half:(host + 1) * half]
        return ["taskset", "-c", ",".join(str(c) for c in mine)]

    def describe(self):
        return f"2 namespaces joined by a veth pair ({ADDR[0]}, {ADDR[1]}), " + \
            (f"shaped to {self.shape} with tc tbf" if self.shape else "unshaped")
