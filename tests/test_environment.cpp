// COLLX_* variables (edge case F3) and launcher environments (torchrun, Open MPI, MPICH, Slurm,
// collx-run): values parsed or rejected with the variable's name, never turned into garbage.

// First, before anything else includes <unistd.h>: environment.hpp's own declaration of environ
// (C++ linkage) once made a later <unistd.h> fail to compile.
#include <collx/environment.hpp>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <clocale>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <collx/bootstrap/env.hpp>
#include <collx/communicator.hpp>
#include <collx/environment.hpp>
#include <collx/launch.hpp>
#include <collx/transport/shm.hpp>
#include <collx/transport/threads.hpp>

#include <unistd.h>

namespace {
using shm = collx::detail::transport_impl::shm_transport;
/// Sets variables for one scope and restores the previous environment afterwards.
struct scoped_env {
  std::vector<std::pair<std::string, std::string>> saved;
  std::vector<std::string> unset_after;
  scoped_env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto [k, v] : vars) {
      if (const char* old = std::getenv(k)) saved.emplace_back(k, old);
      else unset_after.emplace_back(k);
      if (v) ::setenv(k, v, 1);
      else ::unsetenv(k);
    }
  }
  ~scoped_env() {
    for (auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
    for (auto& k : unset_after) ::unsetenv(k.c_str());
  }
};

/// Clears every launcher variable collx reads.
scoped_env no_launcher() {
  return scoped_env{{"COLLX_RANK", nullptr}, {"COLLX_WORLD_SIZE", nullptr}, {"COLLX_LOCAL_RANK", nullptr},
                    {"COLLX_LOCAL_WORLD_SIZE", nullptr}, {"COLLX_JOB_ID", nullptr}, {"RANK", nullptr},
                    {"WORLD_SIZE", nullptr}, {"LOCAL_RANK", nullptr}, {"LOCAL_WORLD_SIZE", nullptr},
                    {"OMPI_COMM_WORLD_RANK", nullptr}, {"OMPI_COMM_WORLD_SIZE", nullptr},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", nullptr}, {"OMPI_COMM_WORLD_LOCAL_SIZE", nullptr},
                    {"PMI_RANK", nullptr}, {"PMI_SIZE", nullptr}, {"SLURM_PROCID", nullptr}, {"SLURM_NTASKS", nullptr},
                    {"SLURM_LOCALID", nullptr}, {"SLURM_STEP_TASKS_PER_NODE", nullptr}, {"SLURM_NODEID", nullptr},
                    {"SLURM_JOB_ID", nullptr}, {"SLURM_STEP_ID", nullptr}, {"SLURM_STEPID", nullptr}, {"TORCHELASTIC_RUN_ID", nullptr}, {"OMPI_MCA_ess_base_jobid", nullptr},
                    {"PMIX_NAMESPACE", nullptr}, {"MPI_LOCALRANKID", nullptr}, {"MPI_LOCALNRANKS", nullptr}};
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const collx::error& e) {
    CHECK(e.code() == collx::errc::invalid_argument);
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("F3: sizes are parsed or rejected with the variable's name", "[env][F3]") {
  using collx::env::parse_size;
  CHECK(parse_size("COLLX_SEGMENT_BYTES", "4M") == 4194304);
  CHECK(parse_size("COLLX_SEGMENT_BYTES", "64k") == 65536);
  CHECK(parse_size("COLLX_SEGMENT_BYTES", "0x10") == 16);
  CHECK(parse_size("COLLX_SEGMENT_BYTES", "4096") == 4096);
  CHECK(parse_size("COLLX_SEGMENT_BYTES", "1GiB") == (std::size_t{1} << 30));
  for (const char* bad : {"-1", "abc", "4X", "", " 4", "99999999999999999999", "16777216T"}) {
    INFO(bad);
    const std::string msg = error_of([&] { parse_size("COLLX_SEGMENT_BYTES", bad); });
    CHECK(msg.find("COLLX_SEGMENT_BYTES") != std::string::npos);
  }
  // A number that fits but overflows once its suffix multiplies it is refused, not wrapped
  // (2^34 G is 2^64 bytes: it wrapped to 0); one just below 2^64 bytes is read whole.
  for (const char* wraps : {"17179869184G", "17592186044416M", "18014398509481984K", "17179869185GiB"}) {
    INFO(wraps);
    CHECK(error_of([&] { parse_size("COLLX_SEGMENT_BYTES", wraps); }).find("a size that fits in 64 bits") != std::string::npos);
  }
  CHECK(parse_size("COLLX_SEGMENT_BYTES", "17179869183G") == (std::size_t{17179869183} << 30));
  CHECK(error_of([] { collx::env::parse_seconds("COLLX_TIMEOUT", "-1"); }).find("COLLX_TIMEOUT") != std::string::npos);
  CHECK(error_of([] { collx::env::parse_seconds("COLLX_TIMEOUT", "abc"); }).find("COLLX_TIMEOUT") != std::string::npos);
  CHECK(collx::env::parse_seconds("COLLX_TIMEOUT", "0.5") == 0.5);
  // Three-way switches (COLLX_CMA, COLLX_GPU_WIRING): auto, off or on in their spellings.
  for (const char* v : {"auto", "AUTO"}) CHECK(collx::env::parse_switch("COLLX_CMA", v) == -1);
  for (const char* v : {"0", "off", "False"}) CHECK(collx::env::parse_switch("COLLX_CMA", v) == 0);
  for (const char* v : {"1", "ON", "true"}) CHECK(collx::env::parse_switch("COLLX_CMA", v) == 1);
  for (const char* v : {"", "no", " off", "2"})
    CHECK(error_of([v] { collx::env::parse_switch("COLLX_GPU_WIRING", v); }).find("COLLX_GPU_WIRING='") != std::string::npos);
}

TEST_CASE("F3: sizes are decimal unless 0x; no parser takes white space, signs it forbids or hex seconds",
          "[env][F3]") {
  using collx::env::parse_size;
  // A leading zero is decimal, as the docs say (strtoull's base 0 read "010" as octal 8).
  CHECK(parse_size("COLLX_SHM_BYTES_PER_PEER", "010") == 10);
  CHECK(parse_size("COLLX_SHM_BYTES_PER_PEER", "0100K") == 100 * 1024);
  CHECK(parse_size("COLLX_SHM_BYTES_PER_PEER", "0X1f") == 31);
  CHECK(parse_size("COLLX_SHM_BYTES_PER_PEER", "0x10K") == 16 * 1024);
  CHECK(parse_size("COLLX_SHM_BYTES_PER_PEER", "0") == 0);
  for (const char* bad : {"0x", "0x-1", "0x 1", "4 ", "4\t", "08x", "0b101"}) {
    INFO(bad);
    CHECK(error_of([&] { parse_size("COLLX_SHM_BYTES_PER_PEER", bad); })
              .find("COLLX_SHM_BYTES_PER_PEER='" + std::string(bad) + "' is not valid: expected") != std::string::npos);
  }
  for (const char* bad : {" 5", "\t5", "5 ", "5\n", "", "5x", "99999999999999999999", "+5", "-0", "- 5"}) {
    INFO(bad);
    CHECK(error_of([&] { collx::env::parse_int("COLLX_RANK", bad, 0, 100); })
              .find("COLLX_RANK='" + std::string(bad) + "' is not valid: expected an integer in [0, 100]") !=
          std::string::npos);
  }
  CHECK(collx::env::parse_int("COLLX_RANK", "7", 0, 100) == 7);
  CHECK(collx::env::parse_int("OFFSET", "-3", -5, 5) == -3);
  CHECK(error_of([&] { collx::env::parse_seconds("COLLX_TIMEOUT", "1e30"); })
            .find("COLLX_TIMEOUT='1e30' is not valid: expected at most 1e9 seconds") != std::string::npos);
  for (const char* bad : {" 5", "5 ", "\t0.5", "0x10", "0x1p3", "inf", "nan", "", ".", "e3"}) {
    INFO(bad);
    CHECK(error_of([&] { collx::env::parse_seconds("COLLX_TIMEOUT", bad); })
              .find("COLLX_TIMEOUT='" + std::string(bad) + "' is not valid: expected a positive number of seconds") !=
          std::string::npos);
  }
  CHECK(collx::env::parse_seconds("COLLX_TIMEOUT", "1e3") == 1000.0);
  CHECK(collx::env::parse_seconds("COLLX_TIMEOUT", ".25") == 0.25);
}

TEST_CASE("F3: a COLLX_TIMEOUT under 1 ms is rejected, not rounded to a zero deadline", "[env][F3]") {
  for (const char* bad : {"1e-300", "0.0001", "0.00049"}) {
    INFO(bad);
    scoped_env e{{"COLLX_TIMEOUT", bad}};
    const std::string msg = error_of([] { collx::communicator_options o; });
    CHECK(msg.find("COLLX_TIMEOUT='" + std::string(bad) + "' is not valid: expected") != std::string::npos);
    CHECK(msg.find("1 ms") != std::string::npos);
  }
  // What other values mean does not change: seconds rounded to the nearest millisecond.
  for (auto [v, ms] : std::initializer_list<std::pair<const char*, int>>{{"0.0006", 1}, {"0.001", 1}, {"0.0126", 13}, {"300", 300000}}) {
    INFO(v);
    scoped_env e{{"COLLX_TIMEOUT", v}};
    CHECK(collx::communicator_options{}.timeout == std::chrono::milliseconds(ms));
  }
  // An empty variable counts as unset.
  scoped_env e{{"COLLX_TIMEOUT", ""}};
  CHECK(collx::communicator_options{}.timeout == std::chrono::seconds(300));
}

TEST_CASE("COLLX_CONNECT_TIMEOUT bounds a shared-memory start", "[env]") {
  {
    scoped_env e{{"COLLX_CONNECT_TIMEOUT", "0.0004"}};
    const std::string msg = error_of([] { collx::shm_options o; });
    CHECK(msg.find("COLLX_CONNECT_TIMEOUT='0.0004' is not valid: expected") != std::string::npos);
  }
  {
    scoped_env e{{"COLLX_CONNECT_TIMEOUT", "soon"}};
    CHECK(error_of([] { collx::shm_options o; }).find("COLLX_CONNECT_TIMEOUT='soon'") != std::string::npos);
  }
  {
    scoped_env e{{"COLLX_CONNECT_TIMEOUT", ""}};
    CHECK(collx::shm_options{}.connect_timeout == std::chrono::seconds(60));
  }
  // Rank 0 of a 2-rank job whose rank 1 never comes: it gives up after 0.3 s, not 60, and says
  // which variable sets that.
  scoped_env e{{"COLLX_CONNECT_TIMEOUT", "0.3"}};
  CHECK(collx::shm_options{}.connect_timeout == std::chrono::milliseconds(300));
  const std::string job = "test-connect-timeout-" + std::to_string(::getpid());
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    collx::connect_shm(collx::launch_info{0, 2, 0, 2, job, "test"});
  } catch (const collx::error& e) {
    CHECK(e.code() == collx::errc::timeout);
    msg = e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(msg.find("missing: rank 1") != std::string::npos);
  CHECK(msg.find("COLLX_CONNECT_TIMEOUT") != std::string::npos);
  CHECK(waited >= std::chrono::milliseconds(300));
  CHECK(waited < std::chrono::seconds(5));
}

TEST_CASE("F3: a bad COLLX_TIMEOUT or COLLX_SEGMENT_BYTES stops communicator creation with its name", "[env][F3]") {
  {
    scoped_env e{{"COLLX_TIMEOUT", "abc"}};
    CHECK(error_of([] { collx::communicator_options o; }).find("COLLX_TIMEOUT='abc'") != std::string::npos);
  }
  {
    scoped_env e{{"COLLX_SEGMENT_BYTES", "-1"}};
    CHECK(error_of([] { collx::communicator_options o; }).find("COLLX_SEGMENT_BYTES='-1'") != std::string::npos);
  }
  {
    scoped_env e{{"COLLX_TIMEOUT", "2.5"}, {"COLLX_SEGMENT_BYTES", "4M"}};
    collx::communicator_options o;
    CHECK(o.timeout == std::chrono::milliseconds(2500));
    CHECK(o.max_segment_bytes == 4194304);
  }
}

TEST_CASE("F3: per-collective algorithm overrides apply to that collective only", "[env][F3]") {
  using collx::collective;
  const auto o = collx::env::parse_algorithms("COLLX_ALGO", "Broadcast:RING");
  CHECK(o.for_collective(collective::broadcast) == collx::algorithm::ring);
  CHECK(!o.for_collective(collective::allreduce));
  const auto all = collx::env::parse_algorithms("COLLX_ALGO", "tree,allreduce:direct");
  CHECK(all.for_collective(collective::allreduce) == collx::algorithm::direct);
  CHECK(all.for_collective(collective::reduce) == collx::algorithm::tree);
  // A bare name fills in the collectives not named, wherever it stands (it used to win when last).
  const auto after = collx::env::parse_algorithms("COLLX_ALGO", "allreduce:tree,ring");
  CHECK(after.for_collective(collective::allreduce) == collx::algorithm::tree);
  CHECK(after.for_collective(collective::broadcast) == collx::algorithm::ring);
  // Two answers for one collective (or for all) are refused, not settled by the last one.
  CHECK(error_of([] { collx::env::parse_algorithms("COLLX_ALGO", "allreduce:ring,Allreduce:tree"); })
            .find("allreduce is named twice") != std::string::npos);
  CHECK(error_of([] { collx::env::parse_algorithms("COLLX_ALGO", "tree,ring"); }).find("not two (tree and ring)") !=
        std::string::npos);
  CHECK(error_of([] { collx::env::parse_algorithms("COLLX_ALGO", "bcast:ring"); }).find("COLLX_ALGO") != std::string::npos);
  CHECK(error_of([] { collx::env::parse_algorithms("COLLX_ALGO", "allreduce:fast"); }).find("COLLX_ALGO") !=
        std::string::npos);
  // An empty item (a trailing, leading or doubled comma) is refused like any other bad one.
  for (const char* v : {"ring,", "allreduce:tree,", ",", ",ring", "allreduce:tree,,broadcast:ring"}) {
    INFO(v);
    CHECK(error_of([v] { collx::env::parse_algorithms("COLLX_ALGO", v); }).find("COLLX_ALGO='" + std::string(v) + "' is not valid") !=
          std::string::npos);
  }
  // Every collective the parser accepts is in the message of an unknown one; barrier and send_recv,
  // which run one fixed schedule, are refused (accepting them would do nothing).
  const std::string unknown = error_of([] { collx::env::parse_algorithms("COLLX_ALGO", "bcast:ring"); });
  const std::string listed = unknown.substr(0, unknown.find("(barrier and send_recv have no algorithm"));
  REQUIRE(listed.size() < unknown.size());
  for (const collective c : collx::env::all_collectives) {
    INFO(collx::collective_name(c));
    const bool choosable = c != collective::barrier && c != collective::send_recv;
    CHECK(choosable == (listed.find(std::string(collx::collective_name(c))) != std::string::npos));
    if (choosable) CHECK_NOTHROW(collx::env::parse_algorithms("COLLX_ALGO", std::string(collx::collective_name(c)) + ":direct"));
  }
  for (const char* v : {"barrier:ring", "allreduce:ring,send-recv:tree"})
    CHECK(error_of([v] { collx::env::parse_algorithms("COLLX_ALGO", v); }).find("no algorithm to choose") !=
          std::string::npos);
  // all_to_all has no tree: named for it, an error; a bare "tree" leaves it to select(), which runs direct.
  CHECK(error_of([] { collx::env::parse_algorithms("COLLX_ALGO", "all_to_all:tree"); }).find("no tree algorithm") !=
        std::string::npos);
  CHECK(collx::env::parse_algorithms("COLLX_ALGO", "tree").for_collective(collective::all_to_all) == collx::algorithm::tree);
  // The override reaches algo::automatic: a communicator told broadcast:ring picks ring for it only.
  scoped_env e{{"COLLX_ALGO", "broadcast:ring"}};
  auto comms = collx::make_thread_communicators(2);
  CHECK(comms[0].select({collective::broadcast, 2, 1 << 20, true}) == collx::algorithm::ring);
  CHECK(comms[0].select({collective::allreduce, 2, 8, true}) == collx::cost_model{}.choose({collective::allreduce, 2, 8, true}));
}

TEST_CASE("F3: the table of collective names and the enum stay in step", "[env][F3]") {
  using collx::collective;
  CHECK(collx::env::all_collectives.size() == static_cast<std::size_t>(collective::send_recv) + 1);
  for (std::size_t i = 0; i < collx::env::all_collectives.size(); ++i) {
    const collective c = collx::env::all_collectives[i];
    CHECK(static_cast<std::size_t>(c) == i);
    CHECK(collx::env::parse_collective_name(collx::collective_name(c)) == c);
    CHECK(collx::collective_name(c) != "?");
  }
  CHECK(collx::env::parse_collective_name("ALL-GATHER") == collective::all_gather);
  CHECK(collx::env::parse_collective_name("all_reduce") == collective::allreduce);  // nccl-tests' spelling
  CHECK(collx::env::parse_collective_name("All-Reduce") == collective::allreduce);
  CHECK(collx::env::parse_collective_name("alltoall") == collective::all_to_all);
  CHECK(!collx::env::parse_collective_name("allgatherv"));
}

TEST_CASE("F3: unknown COLLX_ variables warn with the closest valid name", "[env][F3]") {
  std::string a = "COLLX_TIMEOUTS=3", b = "COLLX_ALGORITHM=ring", c = "COLLX_TIMEOUT=3", d = "PATH=/bin";
  char* envp[] = {a.data(), b.data(), c.data(), d.data(), nullptr};
  const auto w = collx::env::unknown_variable_warnings(envp);
  REQUIRE(w.size() == 2);
  CHECK(w[0].find("COLLX_TIMEOUTS") != std::string::npos);
  CHECK(w[0].find("did you mean COLLX_TIMEOUT?") != std::string::npos);
  CHECK(w[1].find("did you mean COLLX_ALGO?") != std::string::npos);
}

TEST_CASE("README's table of environment variables lists every variable collx reads", "[env][F3]") {
  std::ifstream f(COLLX_README);
  REQUIRE(f.good());
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const auto& v : collx::environment_variables) {
    INFO(v.name);
    CHECK(text.find("| `" + std::string(v.name) + "` | " + std::string(v.values) + " | " + std::string(v.meaning) +
                    " |") != std::string::npos);
  }
}

TEST_CASE("launchers: torchrun, Open MPI, MPICH, Slurm and collx-run environments", "[env][bootstrap]") {
  auto clean = no_launcher();
  SECTION("none") {
    CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("COLLX_RANK") != std::string::npos);
  }
  SECTION("torchrun") {
    scoped_env e{{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                 {"TORCHELASTIC_RUN_ID", "abc"}, {"MASTER_PORT", "29500"}};
    const auto i = collx::bootstrap::from_environment();
    CHECK(i.source == "torchrun");
    CHECK((i.rank == 3 && i.world_size == 8 && i.local_rank == 1 && i.local_world_size == 2));
    CHECK(i.job_id == "torch-abc-29500");
  }
  SECTION("Open MPI") {
    scoped_env e{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_MCA_ess_base_jobid", "12345"}};
    const auto i = collx::bootstrap::from_environment();
    CHECK(i.source == "Open MPI");
    CHECK((i.rank == 1 && i.world_size == 4 && i.job_id == "ompi-12345"));
  }
  SECTION("MPICH") {
    scoped_env e{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}};
    const auto i = collx::bootstrap::from_environment();
    CHECK(i.source == "MPICH");
    CHECK(i.job_id.rfind("ppid-", 0) == 0);
  }
  SECTION("Slurm") {
    scoped_env e{{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "3"},
                 {"SLURM_STEP_TASKS_PER_NODE", "4,3"}, {"SLURM_NODEID", "1"}, {"SLURM_JOB_ID", "99"}};
    const auto i = collx::bootstrap::from_environment();
    CHECK((i.source == "Slurm" && i.rank == 5 && i.world_size == 7 && i.local_world_size == 3 && i.job_id == "slurm-99.3"));
    CHECK(collx::bootstrap::launcher_in_environment() == "Slurm");
    CHECK(collx::bootstrap::detail::slurm_tasks_on_node("4(x2),3", 1) == 4);
    CHECK(collx::bootstrap::detail::slurm_tasks_on_node("4(x2),3", 2) == 3);
    CHECK(collx::bootstrap::detail::slurm_tasks_on_node("1(x1048576),3", 1048576) == 3);
    CHECK_FALSE(collx::bootstrap::detail::slurm_tasks_on_node("4(x2),3", 3).has_value());  // fewer nodes
    // Malformed (sscanf took these, and summed repeats past INT_MAX: undefined behaviour).
    for (const char* bad : {"1(x1048576),1(x2147483647)", "4(x-2),3", "-4,3", "0,3", "4(x0),3", "4x,3", "4(x2,3", "4(x2)z,3",
                            "4 ,3", ",3", "", "99999999,3", "4,"}) {
      INFO(bad);
      CHECK(error_of([&] { (void)collx::bootstrap::detail::slurm_tasks_on_node(bad, 1048577); })
                .find("SLURM_STEP_TASKS_PER_NODE=") != std::string::npos);
    }
  }
  SECTION("a Slurm batch script or salloc shell is one process, not rank 0 of SLURM_NTASKS") {
    // Before, `sbatch -n 4` running a program straight from its script made it rank 0 of 4: it
    // waited for 3 ranks until the connect timeout, and the examples refused --ranks 4.
    scoped_env e{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}, {"SLURM_JOB_ID", "99"}};
    CHECK_FALSE(collx::bootstrap::launcher_in_environment());
    CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("batch script") != std::string::npos);
    CHECK_FALSE(collx::joins_launched_job(4));
    CHECK_FALSE(collx::joins_launched_job(0));
    for (const char* not_a_task_step : {"batch", "extern", "4294967291", "", "1x"}) {
      INFO(not_a_task_step);
      scoped_env step{{"SLURM_STEP_ID", not_a_task_step}};
      CHECK_FALSE(collx::bootstrap::launcher_in_environment());
    }
    {
      scoped_env step{{"SLURM_STEPID", "3"}};  // the older name srun still sets
      CHECK(collx::bootstrap::launcher_in_environment() == "Slurm");
      CHECK(collx::bootstrap::from_environment().job_id == "slurm-99.3");  // not .0: steps apart
    }
    {  // torchrun or mpirun inside the batch script: theirs
      scoped_env t{{"RANK", "2"}, {"WORLD_SIZE", "3"}};
      CHECK(collx::bootstrap::launcher_in_environment() == "torchrun");
      CHECK(collx::bootstrap::from_environment().world_size == 3);
    }
  }
  SECTION("RANK/WORLD_SIZE left over inside an srun step of more tasks are an error, not tasks sharing rank 0") {
    // Before (a new-user trial): srun -n 2 in a shell exporting RANK=0 WORLD_SIZE=1 made both tasks
    // rank 0 of a 1-rank job with the step's job id: one "reduced" its own data alone and reported
    // success, the other failed on "a running job with the same job id".
    scoped_env e{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "77"},
                 {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_NODEID", "0"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}};
    const std::string msg = error_of([] { collx::bootstrap::from_environment(); });
    CHECK(msg.find("RANK=0 WORLD_SIZE=1 (torchrun, 1 on this node) inside an srun step of 2 tasks on this node") !=
          std::string::npos);
    {  // MPICH's ranks by hand alike
      scoped_env m{{"RANK", nullptr}, {"WORLD_SIZE", nullptr}, {"PMI_RANK", "0"}, {"PMI_SIZE", "1"}};
      CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("PMI_RANK=0 PMI_SIZE=1 (MPICH") != std::string::npos);
    }
    {  // a job per node of a multi-node step (one task per node, two ranks each): fine, /dev/shm is per node
      scoped_env m{{"SLURM_NTASKS", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x4)"}, {"SLURM_NODEID", "2"}, {"RANK", "1"},
                   {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}};
      CHECK(collx::bootstrap::from_environment().world_size == 2);
    }
    {  // the same where Slurm's PMIx plugin names the step's namespace (srun --mpi=pmix)
      scoped_env pmix{{"PMIX_NAMESPACE", "slurm.pmix.77.0"}};
      CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("inside an srun step") != std::string::npos);
    }
    {  // torchrun's own workers bring its job id: several per task is what it does
      scoped_env t{{"TORCHELASTIC_RUN_ID", "r1"}, {"MASTER_PORT", "29500"}};
      CHECK(collx::bootstrap::from_environment().job_id == "torch-r1-29500");
    }
    {  // as does a job given its own id
      scoped_env j{{"COLLX_JOB_ID", "mine"}};
      CHECK(collx::bootstrap::from_environment().world_size == 1);
    }
    {  // ranks by hand as many as the step's tasks or more (a wrapper starting several per task): theirs
      scoped_env more{{"RANK", "3"}, {"WORLD_SIZE", "4"}};
      CHECK(collx::bootstrap::from_environment().job_id == "slurm-77.0");
    }
  }
  SECTION("a program that can start its own ranks joins a launched job unless it is the job's one process") {
    CHECK_FALSE(collx::joins_launched_job(4));  // no launcher: it starts them
    {
      scoped_env e{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_STEP_ID", "0"}};  // srun --pty bash
      CHECK(collx::joins_launched_job(0));
      CHECK(collx::joins_launched_job(1));
      CHECK_FALSE(collx::joins_launched_job(4));
    }
    {
      scoped_env e{{"COLLX_RANK", "1"}, {"COLLX_WORLD_SIZE", "4"}};
      CHECK(collx::joins_launched_job(0));
      CHECK(collx::joins_launched_job(4));
      CHECK(collx::joins_launched_job(2));  // the caller then reports --ranks 2 against the launcher's 4
    }
    {  // collx-run -n 1: one rank asked for, not an interactive shell (as srun --pty bash is)
      scoped_env e{{"COLLX_RANK", "0"}, {"COLLX_WORLD_SIZE", "1"}};
      CHECK(collx::joins_launched_job(0));
      CHECK(collx::joins_launched_job(4));  // the caller then reports --ranks 4 against collx-run's 1
    }
    {
      scoped_env e{{"COLLX_RANK", "1"}, {"COLLX_WORLD_SIZE", "x"}};
      CHECK(error_of([] { collx::joins_launched_job(4); }).find("COLLX_WORLD_SIZE") != std::string::npos);
    }
  }
  SECTION("collx-run") {
    scoped_env e{{"COLLX_RANK", "0"}, {"COLLX_WORLD_SIZE", "1"}, {"COLLX_JOB_ID", "my job/1"}};
    const auto i = collx::bootstrap::from_environment();
    CHECK((i.source == "collx-run" && i.job_id == "my job/1"));
    // its segment: a readable prefix, then a hash of the whole id
    CHECK(shm::segment_name(i.job_id).rfind("/collx-" + std::to_string(::getuid()) + "-my_job_1-", 0) == 0);
  }
  SECTION("job ids that differ stay apart in shared-memory names") {
    // The segment name of a job with torchrun's variables, and COLLX_JOB_ID when `collx_id` is
    // given (it wins); the id part after "/collx-<uid>-".
    const std::string prefix = "/collx-" + std::to_string(::getuid()) + "-";
    const auto job_of = [&prefix](const char* collx_id, const char* run_id = "r", const char* port = "29500") {
      scoped_env e{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RUN_ID", run_id}, {"MASTER_PORT", port}, {"COLLX_JOB_ID", collx_id}};
      const std::string name = shm::segment_name(collx::bootstrap::from_environment().job_id);
      REQUIRE(name.rfind(prefix, 0) == 0);
      CHECK(shm::segment_name(name.substr(prefix.size())) == name);  // a name's id part names itself
      return name.substr(prefix.size());
    };
    const auto allowed = [](const std::string& id) {
      return id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
             });
    };
    CHECK(job_of("run-12.a_b") == "run-12.a_b");  // a clean id is kept as it is
    const std::string slash = job_of("team/a"), colon = job_of("team:a");
    CHECK(slash != colon);
    const std::string long_a(70, 'a'), long_b = std::string(69, 'a') + "b";
    CHECK(job_of(long_a.c_str()) != job_of(long_b.c_str()));
    // torchrun: a long run id must not cut off the MASTER_PORT that tells concurrent jobs apart
    const std::string run(62, 'r');
    const std::string p1 = job_of(nullptr, run.c_str(), "29500"), p2 = job_of(nullptr, run.c_str(), "29600");
    CHECK(p1 != p2);
    for (const auto& id : {slash, colon, p1, p2, job_of(long_a.c_str())}) {
      INFO(id);
      CHECK(allowed(id));
    }
  }
  SECTION("missing and malformed variables are named") {
    {
      scoped_env e{{"RANK", "1"}};
      CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("WORLD_SIZE") != std::string::npos);
    }
    {
      scoped_env e{{"RANK", "4"}, {"WORLD_SIZE", "4"}};
      CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("RANK='4'") != std::string::npos);
    }
    {
      scoped_env e{{"RANK", "x"}, {"WORLD_SIZE", "4"}};
      CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("RANK='x'") != std::string::npos);
    }
  }
  SECTION("nested launchers: the innermost wins, the outer job's variables are not read") {
    // collx-run inside an srun step (or an sbatch script's SLURM_PROCID=0, SLURM_NTASKS=1): before,
    // every rank aborted with "launcher variables contradict each other".
    {
      scoped_env e{{"COLLX_RANK", "1"}, {"COLLX_WORLD_SIZE", "2"}, {"COLLX_LAUNCH_ID", "x"}, {"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}};
      const auto info = collx::bootstrap::from_environment();
      CHECK(info.rank == 1);
      CHECK(info.world_size == 2);
      CHECK(info.source == "collx-run");
    }
    {  // torchrun's workers inside a 2-node srun step, and mpirun inside an sbatch script
      scoped_env e{{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                   {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}};
      const auto info = collx::bootstrap::from_environment();
      CHECK(info.rank == 5);
      CHECK(info.world_size == 8);
      CHECK(info.local_rank == 1);
    }
    {
      scoped_env e{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}};
      CHECK(collx::bootstrap::from_environment().rank == 3);
    }
    {  // the winner's own variables are still checked
      scoped_env e{{"COLLX_RANK", "2"}, {"COLLX_WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}};
      CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("COLLX_RANK") != std::string::npos);
    }
    {  // a RANK/WORLD_SIZE left over in an mpirun's shell is not taken for torchrun's: an error
      scoped_env e{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}};
      const std::string msg = error_of([] { collx::bootstrap::from_environment(); });
      CHECK(msg.find("contradict") != std::string::npos);
      CHECK(msg.find("OMPI_COMM_WORLD_RANK=2") != std::string::npos);
    }
    {  // hand-set COLLX_* (no COLLX_LAUNCH_ID) against mpirun's: an error too
      scoped_env e{{"COLLX_RANK", "1"}, {"COLLX_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
      CHECK(error_of([] { collx::bootstrap::from_environment(); }).find("contradict") != std::string::npos);
    }
  }
}

TEST_CASE("numbers are read with a '.' whatever locale the program set", "[env]") {
  // A program that calls setlocale(LC_ALL, "") under a comma-decimal locale: std::strtod then read
  // COLLX_TIMEOUT=1.5 as 1 and stopped at the '.', so every rank refused the variable. CI generates
  // de_DE.UTF-8 (.ci/run); elsewhere the case skips without one.
  const std::string saved = std::setlocale(LC_ALL, nullptr);
  struct restore {
    const std::string& locale;
    ~restore() { std::setlocale(LC_ALL, locale.c_str()); }
  } restore_at_end{saved};
  if (!std::setlocale(LC_ALL, "de_DE.UTF-8") && !std::setlocale(LC_ALL, "de_DE.utf8")) {
    SUCCEED("skipped: no de_DE locale installed (localedef -i de_DE -f UTF-8 de_DE.UTF-8)");
    return;
  }
  char* end = nullptr;
  REQUIRE(std::strtod("1.5", &end) == 1.0);  // the locale took: '.' is not its decimal point
  CHECK(collx::env::parse_seconds("COLLX_TIMEOUT", "1.5") == 1.5);
  CHECK(collx::env::parse_seconds("COLLX_TIMEOUT", "2.5e-1") == 0.25);
}
