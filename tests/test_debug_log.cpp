// COLLX_DEBUG's log (collx/debug_log.hpp): the values and file patterns it takes, and what it
// prints at each level for thread ranks, read back from the log file and compared with what the
// calls were and with what communicator::select answers. The hidden cases [.env_file] and
// [.env_bad] read the environment themselves, so they run only in processes of their own (ctest
// test_debug_log_env and test_debug_log_bad_env in tests/CMakeLists.txt), where no set_log came
// first.
#include <catch2/catch.hpp>

#include <collx/collx.hpp>
#include <collx/debug_log.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

std::size_t count_matching(const std::vector<std::string>& lines, const std::string& pattern) {
  const std::regex re(pattern);
  std::size_t n = 0;
  for (const auto& l : lines) n += std::regex_search(l, re) ? 1 : 0;
  return n;
}

std::string error_of(auto&& f, collx::errc* code = nullptr) {
  try {
    f();
  } catch (const collx::error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "(no error)";
}

/// A log file of this test's own, removed afterwards; the log goes back to off.
struct log_file {
  fs::path path = fs::temp_directory_path() / ("collx-test-debug-log-" + std::to_string(::getpid()) + ".log");
  log_file() { fs::remove(path); }
  ~log_file() {
    collx::set_log(collx::log_level::off);
    fs::remove(path);
  }
};

/// algo::automatic's choice for collective `name` at `bytes`, as an INFO line's "name a, b from X, ..."
/// says it (the entry whose "from" is the largest one at or below `bytes`).
std::optional<std::string> described_choice(const std::string& line, const std::string& name, std::size_t bytes) {
  auto at = line.find(": " + name + " ");  // the first collective follows "algo::automatic: "
  if (at == std::string::npos) at = line.find("; " + name + " ");
  if (at == std::string::npos) return std::nullopt;
  std::string part = line.substr(at + name.size() + 3);
  part = part.substr(0, part.find(';'));
  std::optional<std::string> choice;
  std::stringstream items(part);
  for (std::string item; std::getline(items, item, ',');) {
    std::smatch m;
    if (std::regex_match(item, m, std::regex(" ?(ring|tree|direct)"))) {
      choice = m[1];
    } else if (std::regex_match(item, m, std::regex(" (ring|tree|direct) from ([0-9]+) (B|KiB|MiB|GiB)"))) {
      const std::size_t unit = m[3] == "B" ? 1 : m[3] == "KiB" ? 1024 : m[3] == "MiB" ? 1 << 20 : 1 << 30;
      if (std::stoull(m[2]) * unit <= bytes) choice = m[1];
    } else {
      return std::nullopt;
    }
  }
  return choice;
}

}  // namespace

TEST_CASE("COLLX_DEBUG takes off, warn, info and trace; others name the variable", "[debug_log][env]") {
  using collx::log_level;
  for (const char* off : {"", "off", "OFF", "0", "none"}) CHECK(collx::parse_log_level("COLLX_DEBUG", off) == log_level::off);
  CHECK(collx::parse_log_level("COLLX_DEBUG", "warn") == log_level::warn);
  CHECK(collx::parse_log_level("COLLX_DEBUG", "Info") == log_level::info);
  CHECK(collx::parse_log_level("COLLX_DEBUG", "TRACE") == log_level::trace);
  for (const char* bad : {"verbose", "1", "warning", " info", "trace,info"}) {
    INFO(bad);
    collx::errc code{};
    const std::string e = error_of([&] { (void)collx::parse_log_level("COLLX_DEBUG", bad); }, &code);
    CHECK(code == collx::errc::invalid_argument);
    CHECK(e.find("COLLX_DEBUG='" + std::string(bad) + "' is not valid: expected off, warn, info or trace") !=
          std::string::npos);
  }
}

TEST_CASE("COLLX_DEBUG_FILE patterns: %h, %p and %%, nothing else after a %", "[debug_log][env]") {
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof host - 1) == 0);
  const std::string pid = std::to_string(::getpid());
  CHECK(collx::expand_log_path("COLLX_DEBUG_FILE", "/tmp/log") == "/tmp/log");
  CHECK(collx::expand_log_path("COLLX_DEBUG_FILE", "/tmp/collx.%h.%p.log") ==
        "/tmp/collx." + std::string(host) + "." + pid + ".log");
  CHECK(collx::expand_log_path("COLLX_DEBUG_FILE", "100%%-%p") == "100%-" + pid);
  for (const char* bad : {"/tmp/%r.log", "/tmp/x%", "%d"}) {
    INFO(bad);
    collx::errc code{};
    const std::string e = error_of([&] { (void)collx::expand_log_path("COLLX_DEBUG_FILE", bad); }, &code);
    CHECK(code == collx::errc::invalid_argument);
    CHECK(e.find("COLLX_DEBUG_FILE='" + std::string(bad) + "' is not valid") != std::string::npos);
  }
  collx::errc code{};
  const std::string e = error_of([] { collx::set_log(collx::log_level::info, "/nonexistent-dir-of-collx/x.log"); }, &code);
  CHECK(code == collx::errc::system);
  CHECK(e.find("cannot open '/nonexistent-dir-of-collx/x.log'") != std::string::npos);
  CHECK_FALSE(collx::log_enabled(collx::log_level::warn));  // left as it was (off)
}

TEST_CASE("COLLX_DEBUG=trace: each communicator and each call of each rank, once, with counts and bytes",
          "[debug_log][threads]") {
  log_file f;
  collx::set_log(collx::log_level::trace, f.path.string());
  const int n = 3;
  std::vector<std::string> described(n);
  collx::run_threads(n, [&](collx::communicator& comm) {
    const int r = comm.rank();
    described[static_cast<std::size_t>(r)] = comm.describe();
    std::vector<float> v(1000, static_cast<float>(r));
    collx::allreduce<collx::algo::ring>(comm, std::span<float>(v));
    std::vector<std::int32_t> mine(5, r), all(15, -1);
    collx::all_gather(comm, std::span<const std::int32_t>(mine), std::span<std::int32_t>(all));
    std::vector<double> out(7, r), in(7, -1);
    collx::send_recv(comm, std::span<const double>(out), (r + 1) % n, std::span<double>(in), (r + n - 1) % n);
  });
  collx::set_log(collx::log_level::off);
  const auto lines = read_lines(f.path);
  INFO("the log:\n" << joined(lines));
  // Every line: "HH:MM:SS.uuuuuu host:pid:tid collx LEVEL text".
  CHECK(count_matching(lines, "^[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6} [^ ]+:" + std::to_string(::getpid()) +
                                  ":[0-9]+ collx (INFO|TRACE) ") == lines.size());
  for (int r = 0; r < n; ++r) {
    const std::string rk = "rank " + std::to_string(r) + "/3 ";
    INFO(rk);
    CHECK(count_matching(lines, "collx INFO " + rk + "communicator: transport threads, timeout [0-9]+ m?s, segments of ") == 1);
    CHECK(count_matching(lines, "collx TRACE " + rk + "allreduce#1<float32,sum,ring> count 1000 \\(3\\.9 KiB\\): [0-9.]+ us$") == 1);
    CHECK(count_matching(lines, "collx TRACE " + rk + "all_gather#2<int32,[a-z]+> count 15 \\(60 B\\): [0-9.]+ us$") == 1);
    CHECK(count_matching(lines, "collx TRACE " + rk + "send_recv<float64, float64> to " + std::to_string((r + 1) % n) +
                                    " from " + std::to_string((r + n - 1) % n) + " count 7 \\(112 B\\): ") == 1);
  }
  CHECK(count_matching(lines, "collx TRACE ") == 3 * n);  // nothing else, nothing twice
  // The INFO line is describe(), and says what select() answers, size by size.
  for (int r = 0; r < n; ++r) CHECK(count_matching(lines, "collx INFO " + std::regex_replace(described[r], std::regex("[.^$|()\\[\\]{}*+?\\\\]"), "\\$&") + "$") == 1);
  auto comms = collx::make_thread_communicators(n);
  for (const char* name : {"allreduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all"}) {
    const auto coll = collx::env::parse_collective_name(name);
    REQUIRE(coll);
    // Every 4th power of two, and each side of every change the line names (located to the byte:
    // before, the line named the next power of two, up to twice past the change).
    std::vector<std::size_t> sizes;
    for (std::size_t b = 1; b <= (std::size_t{1} << 30); b *= 4) sizes.push_back(b);
    const std::regex from(" from ([0-9]+) (B|KiB|MiB|GiB)");
    for (auto it = std::sregex_iterator(described[0].begin(), described[0].end(), from); it != std::sregex_iterator(); ++it) {
      const std::string unit = (*it)[2];
      const std::size_t x = std::stoull((*it)[1]) * (unit == "B" ? 1 : unit == "KiB" ? 1024 : unit == "MiB" ? 1 << 20 : 1 << 30);
      sizes.push_back(x);
      sizes.push_back(x - 1);
    }
    CHECK(sizes.size() > 16);  // the line names changes
    for (const std::size_t b : sizes) {
      INFO(name << " at " << b << " B: " << described[0]);
      const auto said = described_choice(described[0], name, b);
      REQUIRE(said);
      CHECK(*said == collx::algorithm_name(comms[0].select(collx::selection_query{*coll, n, b, true})));
    }
  }
}

TEST_CASE("COLLX_DEBUG=info names the automatic choice COLLX_ALGO or a selector makes", "[debug_log][threads]") {
  collx::communicator_options o;
  o.algorithm_overrides = collx::env::parse_algorithms("COLLX_ALGO", "tree,allreduce:direct");
  auto comms = collx::make_thread_communicators(2, o);
  const std::string d = comms[1].describe();
  INFO(d);
  CHECK(d.find("rank 1/2 communicator: transport threads") == 0);
  CHECK(d.find("algo::automatic: allreduce direct; reduce_scatter tree; all_gather tree; broadcast tree; reduce tree; all_to_all direct") !=
        std::string::npos);
  o.selector = [](const collx::selection_query&) { return collx::algorithm::ring; };
  o.algorithm_overrides = {};
  o.timeout = std::chrono::milliseconds(1500);
  auto with_selector = collx::make_thread_communicators(2, o);
  CHECK(with_selector[0].describe().find(", timeout 1500 ms, segments of 8 MiB; algo::automatic: the options' selector") !=
        std::string::npos);
}

TEST_CASE("COLLX_DEBUG=info: a hierarchy attached says each rank's node and what runs on the levels",
          "[debug_log][threads]") {
  log_file f;
  collx::set_log(collx::log_level::info, f.path.string());
  (void)collx::make_hierarchical_thread_communicators({"a", "a", "b", "b"});
  (void)collx::make_hierarchical_thread_communicators({"x", "y", "x", "y"});
  collx::communicator_options o;
  o.algorithm_overrides = collx::env::parse_algorithms("COLLX_ALGO", "allreduce:ring,broadcast:tree");
  (void)collx::make_hierarchical_thread_communicators({"a", "a", "b", "b"}, o);
  (void)collx::make_hierarchical_thread_communicators({"a", "b", "c"});  // one rank a node: nothing to gain
  collx::set_log(collx::log_level::off);
  const auto lines = read_lines(f.path);
  const std::string all5 = "allreduce, reduce_scatter, all_gather, broadcast, reduce on the levels";
  CHECK(count_matching(lines, "collx INFO rank 0/4 hierarchy attached: node 0 of 2 \\(world ranks \\[0, 1\\]\\), local rank 0; "
                              "algo::automatic runs " + all5 + "$") == 1);
  CHECK(count_matching(lines, "collx INFO rank 3/4 hierarchy attached: node 1 of 2 \\(world ranks \\[2, 3\\]\\), local rank 1; "
                              "algo::automatic runs " + all5 + "$") == 1);
  CHECK(count_matching(lines, "collx INFO rank 1/4 hierarchy attached: node 1 of 2 \\(world ranks \\[1, 3\\]\\), local rank 0; "
                              "algo::automatic runs " + all5 + " \\(with a commutative op\\)$") == 1);
  CHECK(count_matching(lines, "collx INFO rank 2/4 hierarchy attached: .*algo::automatic runs reduce_scatter, all_gather, "
                              "reduce on the levels$") == 1);
  CHECK(count_matching(lines, "collx INFO rank 2/3 hierarchy attached: node 2 of 3 \\(world ranks \\[2\\]\\), local rank 0; "
                              "algo::automatic runs every collective flat$") == 1);
  CHECK(count_matching(lines, "hierarchy attached") == 4 + 4 + 4 + 3);
  // describe() says it too, after the flat choices.
  auto comms = collx::make_hierarchical_thread_communicators({"a", "a", "b", "b"});
  const std::string d = comms[2].describe();
  INFO(d);
  CHECK(d.find("; algo::automatic, flat: allreduce ") != std::string::npos);
  CHECK(d.find("; hierarchy: node 1 of 2 (world ranks [2, 3]), local rank 0; algo::automatic runs " + all5) !=
        std::string::npos);
}

TEST_CASE("COLLX_DEBUG=trace: a group's or a level's lines say which of the world's ranks it holds",
          "[debug_log][threads]") {
  log_file f;
  collx::set_log(collx::log_level::trace, f.path.string());
  collx::run_threads(4, [&](collx::communicator& comm) {
    auto group = collx::split(comm, comm.rank() % 2, 0);
    std::vector<float> v(6, 1.0f);
    collx::allreduce(*group, std::span<float>(v));
  });
  auto comms = collx::make_hierarchical_thread_communicators({"a", "a", "b", "b"});
  collx::run_threads(comms, [&](collx::communicator& comm) {
    std::vector<float> v(8, 1.0f);
    collx::allreduce<collx::algo::hierarchical<collx::algo::direct, collx::algo::direct>>(comm, std::span<float>(v));
  });
  collx::set_log(collx::log_level::off);
  const auto lines = read_lines(f.path);
  INFO("the log:\n" << joined(lines));
  for (const std::string g : {"\\[0, 2\\]", "\\[1, 3\\]"}) {
    CHECK(count_matching(lines, "collx INFO rank [01]/2 communicator: .* \\(split group \\(color [01]\\) of world ranks " + g +
                                    "\\)$") == 2);
    CHECK(count_matching(lines, "collx TRACE rank [01]/2 allreduce#1<float32,sum,[a-z]+> \\(split group \\(color [01]\\) of "
                                "world ranks " + g + "\\) count 6 \\(24 B\\): [0-9.]+ us$") == 2);
  }
  // The world's call, then its level calls: the node communicators' and the cross-node ones'.
  CHECK(count_matching(lines, "collx TRACE rank [0-3]/4 allreduce#1<float32,sum,hierarchical> count 8 \\(32 B\\): [0-9.]+ us$") == 4);
  CHECK(count_matching(lines, "collx TRACE rank [01]/2 [a-z_]+#[0-9]+<[^>]*> \\(node communicator of world ranks "
                              "\\[(0, 1|2, 3)\\]\\) count [0-9]+ \\([0-9]+ B\\): [0-9.]+ us$") >= 4);
  CHECK(count_matching(lines, "collx TRACE rank [01]/2 [a-z_]+#[0-9]+<[^>]*> \\(cross-node communicator of world ranks "
                              "\\[(0, 2|1, 3)\\]\\) count [0-9]+ \\([0-9]+ B\\): [0-9.]+ us$") >= 4);
}

TEST_CASE("COLLX_DEBUG=warn: each rank logs its communicator's failure once, and nothing at info or trace",
          "[debug_log][threads]") {
  log_file f;
  collx::set_log(collx::log_level::warn, f.path.string());
  const int n = 3;
  std::vector<std::string> errors(n);
  collx::run_threads(n, [&](collx::communicator& comm) {
    const int r = comm.rank();
    std::vector<float> v(r == 2 ? 9 : 10, 1.0f);  // rank 2 disagrees on the count
    try {
      collx::allreduce(comm, std::span<float>(v));
    } catch (const collx::error& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
    try {  // a call on the failed communicator: not logged again
      collx::barrier(comm);
    } catch (const collx::error&) {
    }
  });
  collx::set_log(collx::log_level::off);
  const auto lines = read_lines(f.path);
  INFO("the log:\n" << joined(lines));
  CHECK(count_matching(lines, " collx (INFO|TRACE) ") == 0);
  CHECK(count_matching(lines, " collx WARN ") == lines.size());
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
    CHECK(errors[static_cast<std::size_t>(r)].find("rank 2") != std::string::npos);
    // One line a rank, its first sight of the failure (a rank that starts the all-reduce after
    // rank 2 failed it logs what its call throws then); not the barrier's, nor later ones.
    CHECK(count_matching(lines, "collx WARN rank " + std::to_string(r) +
                                    "/3 communicator failed \\(ranks disagree on the call\\): rank " + std::to_string(r) +
                                    "/3 allreduce#1<[^>]*>: .*rank 2") == 1);
  }
  CHECK(lines.size() == 3);
  // Off again: a failure is not logged any more.
  collx::run_threads(2, [&](collx::communicator& comm) { comm.abort(); });
  CHECK(read_lines(f.path).size() == lines.size());
}

TEST_CASE("COLLX_DEBUG=trace: a call that fails is logged as a failure, not as a call that completed",
          "[debug_log][threads]") {
  log_file f;
  collx::set_log(collx::log_level::trace, f.path.string());
  collx::run_threads(2, [&](collx::communicator& comm) {
    std::vector<std::int16_t> v(comm.rank() == 0 ? 4 : 5, 1);
    collx::broadcast(comm, std::span<std::int16_t>(v.data(), 3), 0);  // completes
    try {
      collx::broadcast(comm, std::span<std::int16_t>(v), 0);  // rank 1 has one more
    } catch (const collx::error&) {
    }
  });
  collx::set_log(collx::log_level::off);
  const auto lines = read_lines(f.path);
  CHECK(count_matching(lines, "collx TRACE rank [01]/2 broadcast#1<int16,[a-z]+> count 3 \\(6 B\\): ") == 2);
  CHECK(count_matching(lines, "collx TRACE .*broadcast#2") == 0);
  CHECK(count_matching(lines, "collx WARN rank [01]/2 communicator failed .*broadcast#2") == 2);
}

TEST_CASE("COLLX_DEBUG and COLLX_DEBUG_FILE from the environment", "[.env_file][debug_log]") {
  // ctest sets COLLX_DEBUG=Trace and COLLX_DEBUG_FILE=<dir>/collx-env-%p.log.
  const char* pattern = std::getenv("COLLX_DEBUG_FILE");
  REQUIRE(pattern);
  const fs::path path = collx::expand_log_path("COLLX_DEBUG_FILE", pattern);
  fs::remove(path);
  collx::run_threads(2, [](collx::communicator& comm) {
    std::vector<std::int64_t> v(3, comm.rank());
    collx::broadcast(comm, std::span<std::int64_t>(v), 1);
  });
  const auto lines = read_lines(path);
  fs::remove(path);
  INFO(path);
  CHECK(count_matching(lines, std::string("collx INFO collx ") + COLLX_VERSION_STRING + "; environment: .*COLLX_DEBUG=Trace") == 1);
  CHECK(count_matching(lines, "collx INFO rank [01]/2 communicator: transport threads") == 2);
  CHECK(count_matching(lines, "collx TRACE rank [01]/2 broadcast#1<int64,[a-z]+> count 3 \\(24 B\\): ") == 2);
}

TEST_CASE("a bad COLLX_DEBUG or COLLX_DEBUG_FILE fails the first communicator and names it", "[.env_bad][debug_log]") {
  // ctest sets COLLX_DEBUG=verbose; each fix is then read at the next communicator.
  collx::errc code{};
  std::string e = error_of([] { (void)collx::make_thread_communicators(2); }, &code);
  CHECK(code == collx::errc::invalid_argument);
  CHECK(e.find("COLLX_DEBUG='verbose' is not valid") != std::string::npos);
  CHECK_FALSE(collx::log_enabled(collx::log_level::warn));

  ::setenv("COLLX_DEBUG", "off", 1);
  ::setenv("COLLX_DEBUG_FILE", "/tmp/collx-%r.log", 1);  // an error even while off
  e = error_of([] { (void)collx::make_thread_communicators(1); }, &code);
  CHECK(code == collx::errc::invalid_argument);
  CHECK(e.find("COLLX_DEBUG_FILE='/tmp/collx-%r.log' is not valid") != std::string::npos);

  ::setenv("COLLX_DEBUG", "off", 1);
  ::unsetenv("COLLX_DEBUG_FILE");
  CHECK(collx::make_thread_communicators(2).size() == 2);  // read: not read again
  CHECK_FALSE(collx::log_enabled(collx::log_level::warn));
}

TEST_CASE("a COLLX_DEBUG_FILE that cannot be opened sends the lines to stderr", "[.env_unopened][debug_log]") {
  // ctest sets COLLX_DEBUG=warn and COLLX_DEBUG_FILE=/nonexistent-dir-of-collx/%p.log: the job runs
  // (stderr says why the file is not used, which ctest's regular expression checks).
  CHECK(collx::make_thread_communicators(2).size() == 2);
  CHECK(collx::log_enabled(collx::log_level::warn));
  CHECK_FALSE(collx::log_enabled(collx::log_level::info));
  collx::log_message(collx::log_level::warn, "a line for stderr");
}
