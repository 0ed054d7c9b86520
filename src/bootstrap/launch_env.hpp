// Launch environments: who this process is (rank, world size, local rank)
// and where the job's store is, read from the variables of whichever launcher
// started it. Comm::from_env looks in this order and uses the first source
// that is present:
//
//   1. braid      BRAID_RANK, BRAID_WORLD_SIZE, BRAID_STORE_ADDR (braid-run)
//   2. torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//                 MASTER_PORT (the store at MASTER_PORT + 1 when torchrun's
//                 agent holds MASTER_PORT: TORCHELASTIC_USE_AGENT_STORE=True)
//   3. TF_CONFIG  TensorFlow's cluster spec (cluster.hpp)
//   4. Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the store on the
//                 first host of SLURM_JOB_NODELIST, port MASTER_PORT or 29500
//   5. Open MPI   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   6. PMIx       PMIX_RANK, with the size from BRAID_WORLD_SIZE or WORLD_SIZE
//
// Open MPI and PMIx carry no address braid can use: BRAID_STORE_ADDR, else
// MASTER_ADDR and MASTER_PORT, say where rank 0 hosts the store (mpirun -x
// BRAID_STORE_ADDR=host:port). BRAID_STORE_ADDR, where set, is the store's
// address for every source. Values come through a lookup function, so that
// tests can feed any environment without touching the process's.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

struct LaunchIdentity {
  std::string source;  // "torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)", for describe() and messages
  int rank = 0;
  int size = 0;
  std::optional<int> local_rank;
  std::optional<int> local_size;  // ranks on this host; fewer than size: the job spans hosts
  std::string store_addr;         // host:port; empty for TF_CONFIG, whose ClusterSpec says
  bool tf_config = false;         // the identity is TF_CONFIG's: read it with ClusterSpec
};

using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

/// The first source of the list above that is present; nullopt when none is.
/// A source that is present but incomplete or malformed (RANK without
/// WORLD_SIZE, SLURM_PROCID=x) throws InvalidArgument naming the variables.
std::optional<LaunchIdentity> launch_identity(const EnvLookup& env);

/// Expands Slurm's compressed host list: "node[01-04,07],gpu3" gives node01,
/// node02, node03, node04, node07, gpu3 (zero padding kept; several bracket
/// groups in one name multiply: "r[1-2]n[1-2]"). Stops after `limit` hosts.
/// Throws InvalidArgument naming the list when it is malformed (an unclosed
/// bracket, a range that runs backwards, a number of more than 9 digits).
std::vector<std::string> expand_nodelist(std::string_view list, std::size_t limit = 65536);

}  // namespace braid
