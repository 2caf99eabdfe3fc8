/// @file bootstrap/env.hpp
/// Rank, world size, local rank and a job id from the launcher's environment: collx-run, torchrun,
/// Open MPI, MPICH (Hydra) or Slurm.
#pragma once

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <collx/environment.hpp>
#include <collx/detail/type_name.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {

/// Where a process sits in a job.
struct launch_info {
  int rank = 0;              ///< global rank, in [0, world_size)
  int world_size = 1;        ///< number of ranks in the job
  int local_rank = 0;        ///< rank among the processes of this node
  int local_world_size = 1;  ///< processes on this node
  std::string job_id;        ///< the same for every rank of one job, different between concurrent jobs
  std::string source;        ///< the launcher the values came from ("collx-run", "torchrun", ...)
  /// One start of the job (COLLX_LAUNCH_ID, which collx-run sets): two starts given the same
  /// job_id never join each other's ranks. Empty where the launcher sets none.
  std::string launch_id = {};  // a default, so that {rank, size, ..., source} stays warning-free
};

namespace bootstrap {

namespace detail {
struct launcher_vars {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};
inline constexpr launcher_vars launchers[] = {
    {"collx-run", "COLLX_RANK", "COLLX_WORLD_SIZE", "COLLX_LOCAL_RANK", "COLLX_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

/// Slurm's SLURM_STEP_TASKS_PER_NODE ("4(x2),3") expanded for node `node`; std::nullopt when it
/// lists fewer nodes.
/// @throws collx::error(invalid_argument) naming the variable for an item other than T or T(xR)
/// with T and R in [1, 2^20] (env::parse_int: sscanf's "%d(x%d)" took negative, huge and trailing
/// text, and the sum of repeats overflowed an int, undefined behaviour found by fuzzing).
inline std::optional<int> slurm_tasks_on_node(std::string_view spec, int node) {
  constexpr std::string_view name = "SLURM_STEP_TASKS_PER_NODE";
  constexpr long long most = 1 << 20;
  long long seen = 0;  // a sum of repeats of at most 2^20 each, one per item of the variable
  std::size_t pos = 0;
  do {
    std::size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view item = spec.substr(pos, comma - pos);
    const std::size_t open = item.find("(x");
    if (open != std::string_view::npos && item.back() != ')') env::reject(name, spec, "Slurm's format such as 4(x2),3");
    const long long tasks = env::parse_int(name, item.substr(0, open), 1, most);
    const long long repeat =
        open == std::string_view::npos ? 1 : env::parse_int(name, item.substr(open + 2, item.size() - open - 3), 1, most);
    if (node < seen + repeat) return static_cast<int>(tasks);
    seen += repeat;
    pos = comma + 1;
  } while (pos <= spec.size());
  return std::nullopt;
}

/// The srun step this process is a task of (SLURM_STEP_ID, or the older SLURM_STEPID, when it is a
/// task step's number), or std::nullopt. srun sets both to the step's number for every task; a
/// batch script or an salloc shell has neither. The batch, extern (pam_slurm_adopt's ssh sessions)
/// and interactive steps, when they set a step id, set a name or a number at the top of the range
/// (10 digits), not a task step's.
inline std::optional<std::string> slurm_task_step() {
  for (const char* name : {"SLURM_STEP_ID", "SLURM_STEPID"}) {
    const auto id = env::get(name);
    if (!id || id->empty() || id->size() > 9) continue;
    bool digits = true;
    for (char c : *id) digits = digits && c >= '0' && c <= '9';
    if (digits) return id;
  }
  return std::nullopt;
}

/// How many tasks of the srun step run on this node (SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID),
/// or std::nullopt where they are not set or not understood.
inline std::optional<int> slurm_step_tasks_here() {
  const auto spec = env::get("SLURM_STEP_TASKS_PER_NODE");
  const auto node = env::get("SLURM_NODEID");
  if (!spec) return std::nullopt;
  char* end = nullptr;
  const long n = node ? std::strtol(node->c_str(), &end, 10) : 0;
  if (node && (node->empty() || *end || n < 0 || n > (1 << 20))) return std::nullopt;
  return slurm_tasks_on_node(*spec, static_cast<int>(n));
}

/// Whether launcher `l`'s variables describe this process as one of its ranks. Slurm's do only
/// inside a task step (slurm_task_step): a batch script or an salloc shell, one process, sees the
/// allocation's SLURM_PROCID=0 and SLURM_NTASKS=N.
inline bool describes_this_process(const launcher_vars& l) {
  return std::string_view(l.source) != "Slurm" || slurm_task_step().has_value();
}

/// The first launcher (in `launchers`' order) whose rank variable is set and describes this
/// process; nullptr when none does.
inline const launcher_vars* first_launcher() {
  for (const auto& l : launchers)
    if (env::get(l.rank) && describes_this_process(l)) return &l;
  return nullptr;
}

/// The job id as shared-memory names carry it (shm_transport::segment_name): an id of at most 64
/// characters from [A-Za-z0-9_.-] unchanged; any other id as the first 47 of its characters
/// (others replaced by _) and a hash of the whole id, so that ids differing only in replaced
/// characters ("team/a", "team:a") or past the 47th (a long torchrun run id followed by its
/// MASTER_PORT) stay apart. Idempotent: its result is returned unchanged.
inline std::string sanitize_job_id(const std::string& id) {
  std::string s = id;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) c = '_';
  if (s == id && s.size() <= 64) return s;
  char hash[18];
  std::snprintf(hash, sizeof hash, "-%016llx", static_cast<unsigned long long>(collx::detail::fnv1a(id)));
  return s.substr(0, 47) + hash;
}
}  // namespace detail

/// The launcher that started this process as one rank of a job, as from_environment finds it
/// ("collx-run", "torchrun", "Open MPI", "MPICH" or "Slurm"), without checking its variables;
/// std::nullopt when none did. Slurm counts inside a job step only (srun's tasks, SLURM_STEP_ID
/// set): a batch script or an salloc shell is one process, whatever SLURM_NTASKS says.
inline std::optional<std::string> launcher_in_environment() {
  if (const auto* l = detail::first_launcher()) return std::string(l->source);
  return std::nullopt;
}

/// Reads the launcher's environment. The first launcher whose rank variable is set wins, in this
/// order: collx-run (COLLX_*), torchrun, Open MPI, MPICH, Slurm (inside a task step: a numeric
/// SLURM_STEP_ID or SLURM_STEPID; see launcher_in_environment). Launchers nest, so the others'
/// variables may describe an outer job: Slurm's always may (collx-run, torchrun or mpirun inside an
/// srun step or an sbatch script) and are not compared, nor is anything when collx-run started
/// this process (COLLX_LAUNCH_ID set). Otherwise another launcher's variables that contradict the
/// winner (a different rank or world size: a RANK/WORLD_SIZE left over in the shell of an mpirun)
/// are an error, as are missing or malformed variables; every message names the variables. So is
/// a winner without a job id of its own (RANK/WORLD_SIZE by hand, MPICH) inside an srun step that
/// has more tasks on this node than the winner has ranks here: the tasks would share ranks of one
/// job.
/// @throws collx::error(errc::invalid_argument)
inline launch_info from_environment() {
  const detail::launcher_vars* found = nullptr;
  launch_info info;
  const bool started_by_collx_run = env::get("COLLX_LAUNCH_ID").has_value();
  for (const auto& l : detail::launchers) {
    const auto r = env::get(l.rank);
    if (!r || !detail::describes_this_process(l)) continue;
    const auto s = env::get(l.size);
    if (!found) {
      if (!s)
        COLLX_THROW(errc::invalid_argument, std::string(l.rank) + " is set (" + l.source + ") but " + l.size + " is not");
      found = &l;
      info.world_size = static_cast<int>(env::parse_int(l.size, *s, 1, 1 << 24));
      info.rank = static_cast<int>(env::parse_int(l.rank, *r, 0, info.world_size - 1));
      if (std::string_view(l.source) == "collx-run" && started_by_collx_run) break;
    } else if (std::string_view(l.source) != "Slurm" &&
               (!s || env::parse_int(l.size, *s, 1, 1 << 24) != info.world_size ||
                env::parse_int(l.rank, *r, 0, 1 << 24) != info.rank)) {
      COLLX_THROW(errc::invalid_argument, std::string("launcher variables contradict each other: ") + found->rank + "=" +
                                              std::to_string(info.rank) + " " + found->size + "=" +
                                              std::to_string(info.world_size) + " but " + l.rank + "=" + *r + " " +
                                              l.size + "=" + s.value_or("(unset)") +
                                              " (a variable left over from another launcher? unset it)");
    }
  }
  if (!found)
    COLLX_THROW(errc::invalid_argument,
                "no launcher environment found: set COLLX_RANK and COLLX_WORLD_SIZE (or start the program with "
                "collx-run -n N, torchrun, mpirun or srun; a Slurm batch script or salloc shell is one process, "
                "not a job step's task)");
  info.source = found->source;
  // Local rank and size: default to a single node.
  info.local_rank = info.rank;
  info.local_world_size = info.world_size;
  if (const auto lr = env::get(found->local_rank))
    info.local_rank = static_cast<int>(env::parse_int(found->local_rank, *lr, 0, info.world_size - 1));
  if (found->local_size) {
    if (const auto ls = env::get(found->local_size))
      info.local_world_size = static_cast<int>(env::parse_int(found->local_size, *ls, 1, info.world_size));
  } else if (const auto spec = env::get("SLURM_STEP_TASKS_PER_NODE")) {
    const int node = static_cast<int>(env::parse_int("SLURM_NODEID", env::get("SLURM_NODEID").value_or("0"), 0, 1 << 20));
    const auto t = detail::slurm_tasks_on_node(*spec, node);
    if (!t) env::reject("SLURM_STEP_TASKS_PER_NODE", *spec, "Slurm's format such as 4(x2),3");
    info.local_world_size = *t;
  }
  if (info.local_rank >= info.local_world_size)
    COLLX_THROW(errc::invalid_argument, "local rank " + std::to_string(info.local_rank) +
                                            " is not below the local world size " + std::to_string(info.local_world_size));
  // Job id: collx's own, else the launcher's, else the parent process (all local ranks share it).
  const auto step = detail::slurm_task_step();
  std::string job;
  bool steps_job = false;  // the id is the srun step's (Slurm's own, or its PMIx plugin's namespace)
  if (auto v = env::get("COLLX_JOB_ID")) job = *v;
  else if (auto t = env::get("TORCHELASTIC_RUN_ID")) job = "torch-" + *t + "-" + env::get("MASTER_PORT").value_or("");
  else if (auto o = env::get("OMPI_MCA_ess_base_jobid")) job = "ompi-" + *o;
  else if (auto p = env::get("PMIX_NAMESPACE")) {
    job = "pmix-" + *p;
    steps_job = p->rfind("slurm.pmix.", 0) == 0;
  } else if (auto sj = env::get("SLURM_JOB_ID")) {
    job = "slurm-" + *sj + "." + step.value_or("0");
    steps_job = true;
  } else {
    job = "ppid-" + std::to_string(::getppid());
  }
  // A winner that brings no job id of its own (RANK and WORLD_SIZE set by hand or left over in the
  // shell, MPICH's PMI_RANK) inside an srun step shares the step's. Where the step has more tasks
  // on this node than that job has ranks here, tasks of this node would claim the same rank of
  // one job: each "rank 0 of 1" reduces only its own data, or they collide on the node's shared
  // memory. (Per node: a job per node of a multi-node step is fine, /dev/shm being per node.)
  if (steps_job && step && std::string_view(found->source) != "Slurm")
    if (const auto here = detail::slurm_step_tasks_here(); here && *here > info.local_world_size)
      COLLX_THROW(errc::invalid_argument,
                  std::string(found->rank) + "=" + std::to_string(info.rank) + " " + found->size + "=" +
                      std::to_string(info.world_size) + " (" + found->source + ", " +
                      std::to_string(info.local_world_size) + " on this node) inside an srun step of " +
                      std::to_string(*here) + " tasks on this node (SLURM_STEP_TASKS_PER_NODE) would make tasks "
                      "share ranks of one job: variables left over in the shell, or one job per task? unset them, "
                      "or give each job its own COLLX_JOB_ID");
  info.job_id = job;
  info.launch_id = env::get("COLLX_LAUNCH_ID").value_or("");
  return info;
}

}  // namespace bootstrap
}  // namespace v0
}  // namespace collx
