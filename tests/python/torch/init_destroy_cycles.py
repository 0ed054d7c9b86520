"""One rank of a braid-run job that creates and destroys the default braid
process group CYCLES times, and checks an all_reduce in each:

    braid-run -n 4 /usr/bin/python3 init_destroy_cycles.py --cycles 200

Every start-up goes through the c10d store adapter (python/torch/c10d_store.hpp):
braid's join waits on torch's TCPStore. In every K-th cycle (--skew-every)
the ranks arrive at init_process_group up to --skew seconds apart, so that
their waits in braid's join run out and start again, as when ranks start at
different times. The first failure ends the run: it prints the cycle, the
step, the exception and its message, and exits 1; rank 0 prints the cycles'
total time at the end.

The ranks share one TCPStore for the whole run, hosted by rank 0 at braid-run's
BRAID_STORE_ADDR, and each cycle joins under its own PrefixStore. Re-creating a
TCPStore per cycle (init_method="tcp://...") would add a race that is torch's,
not braid's: rank 0 closes the store at destroy_process_group while a slower
rank may still be in init_process_group's store-based barrier. And one prefix
per cycle is needed anyway: torch names the default group "0" and its barrier
key the same in every cycle.
"""

import argparse
import datetime
import os
import random
import sys
import time

import torch
import torch.distributed as dist

import braid.torch  # noqa: F401  (registers the backend)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--skew-every", type=int, default=4, metavar="K",
                        help="every K-th cycle the ranks come to init_process_group at different times")
    parser.add_argument("--skew", type=float, default=0.3, metavar="SECONDS",
                        help="each rank then sleeps up to this long first, at random (the same draws every run)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds: the store's and each group's timeout")
    args = parser.parse_args()
    rank, size = int(os.environ["BRAID_RANK"]), int(os.environ["BRAID_WORLD_SIZE"])
    host, port = os.environ["BRAID_STORE_ADDR"].rsplit(":", 1)
    timeout = datetime.timedelta(seconds=args.timeout)
    torch.set_num_threads(1)
    store = dist.TCPStore(host, int(port), size, rank == 0, timeout=timeout)
    expected = size * (size + 1) // 2
    started = time.monotonic()
    for cycle in range(args.cycles):
        step = "init_process_group"
        if args.skew_every > 0 and cycle % args.skew_every == 0:
            time.sleep(random.Random(f"{cycle}/{rank}").uniform(0, args.skew))
        try:
            dist.init_process_group("braid", store=dist.PrefixStore(f"cycle/{cycle}", store), rank=rank,
                                    world_size=size, timeout=timeout)
            step = "all_reduce"
            value = torch.tensor([rank + 1], dtype=torch.int64)
            dist.all_reduce(value)
            if value.item() != expected:
                raise AssertionError(f"all_reduce gave {value.item()}, expected {expected}")
            step = "destroy_process_group"
            dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001  (every failure is reported the same way)
            print(f"rank {rank} of {size}: cycle {cycle + 1} of {args.cycles}: {step} failed: "
                  f"{type(e).__name__}: {e}", flush=True)
            return 1
    if rank == 0:
        elapsed = time.monotonic() - started
        print(f"{args.cycles} cycles of init_process_group, all_reduce and destroy_process_group on {size} ranks "
              f"in {elapsed:.1f} s ({1000 * elapsed / args.cycles:.0f} ms each)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
