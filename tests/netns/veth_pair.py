"""Two network namespaces joined by a veth pair: two hosts on one machine, for
the test drivers that need them (tests/faults/fault_matrix.py's linkdown case,
tests/mirrored/netns/two_hosts.py).

    with VethPair(ns=(A, B), dev=(DA, DB), addr=(IPA, IPB), stale=PATTERN) as net:
        ... run_ip("-n", net.ns[0], ...), ip netns exec net.ns[1] ...

creates namespaces A and B, puts veth end DA (at most 15 characters) with
IPA/24 in A and DB with IPB/24 in B, and brings both ends and each loopback
up. On exit it deletes the namespaces it created, which deletes the veth ends
in them and with them the pair, and warns on stderr about any left behind.

A driver puts its pid in the names; PATTERN matches its names with that pid
as group 1, so that namespaces of an earlier run that was SIGKILLed (its pid
is gone) are deleted before new ones are made.

Raises NamespacesUnavailable where none can be made (no ip command, or ip
netns add refused: not root, no /run/netns): the caller reports a skip.
Raises IpFailed when a later ip command fails: the caller reports a failure.
"""

import os
import shutil
import subprocess
import sys


class NamespacesUnavailable(Exception):
    pass


class IpFailed(Exception):
    pass


def run_ip(*args, check=True):
    """Runs ip with args; raises IpFailed if it fails and check is set."""
    p = subprocess.run(["ip"] + list(args), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    if check and p.returncode != 0:
        raise IpFailed(f"ip {' '.join(args)} failed: {p.stderr.strip()}")
    return p


def remove_stale_namespaces(stale):
    """Deletes namespaces whose name matches stale and whose pid (group 1) is gone."""
    if not os.path.isdir("/run/netns"):
        return
    for ns in os.listdir("/run/netns"):
        m = stale.fullmatch(ns)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            run_ip("netns", "delete", ns, check=False)


def require_tools(*tools):
    """Raises NamespacesUnavailable naming the first of tools that is missing."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise NamespacesUnavailable(f"no {tool} command")


def shape_link(ns, dev, rate):
    """Shapes veth end dev in namespace ns to rate (tc tbf: 1gbit, 10gbit)."""
    p = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                        "burst", "256kb", "latency", "10ms"], capture_output=True, text=True, timeout=10)
    if p.returncode != 0:
        raise IpFailed(f"tc qdisc add on {dev} failed: {p.stderr.strip()}")


def in_namespace(ns, hostname=None):
    """The command prefix that runs a program in namespace ns and, with
    hostname, under that host name (a UTS namespace of its own): ip netns
    exec, unshare and sh each exec the next, so the pid is the program's."""
    if hostname is None:
        return ["ip", "netns", "exec", ns]
    return ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname]


class VethPair:
    """Namespaces ns[0] and ns[1] with a veth pair between them; always deleted."""

    def __init__(self, ns, dev, addr, stale):
        self.ns = ns
        self.dev = dev
        self.addr = addr
        self.stale = stale
        self.created = []

    def __enter__(self):
        if shutil.which("ip") is None:
            raise NamespacesUnavailable("no ip command (iproute2)")
        remove_stale_namespaces(self.stale)
        p = run_ip("netns", "add", self.ns[0], check=False)
        if p.returncode != 0:
            raise NamespacesUnavailable(f"cannot create a network namespace: ip netns add: {p.stderr.strip()}")
        self.created.append(self.ns[0])
        try:
            run_ip("netns", "add", self.ns[1])
            self.created.append(self.ns[1])
            run_ip("link", "add", self.dev[0], "netns", self.ns[0], "type", "veth", "peer", "name", self.dev[1],
                   "netns", self.ns[1])
            for ns, dev, addr in zip(self.ns, self.dev, self.addr):
                run_ip("-n", ns, "link", "set", "lo", "up")
                run_ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
                run_ip("-n", ns, "link", "set", dev, "up")
        except BaseException:
            # A with-block does not call __exit__ when __enter__ raises: clean up here.
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        # Deleting a namespace deletes the veth end in it, and with it the pair.
        for ns in reversed(self.created):
            run_ip("netns", "delete", ns, check=False)
        left = [ns for ns in self.created if os.path.exists(f"/run/netns/{ns}")]
        if left:
            print(f"WARNING: namespaces left behind: {left}", file=sys.stderr)
        return False
