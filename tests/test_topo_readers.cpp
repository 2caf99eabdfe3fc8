// Topology readers on the real fixtures (tests/data/topologies/SOURCES.md): nvidia-smi topo -m text
// as pasted, NCCL topology and graph XML, nccl-tests tables; and their errors, which name line:col.
#include <catch2/catch.hpp>

#include <collx/topo/nccl_tests.hpp>
#include <collx/topo/nccl_xml.hpp>
#include <collx/topo/nvidia_smi.hpp>

#include <algorithm>
#include <regex>
#include <string>
#include <utility>

#include "topo_fixtures.hpp"

using namespace collx::topo;

namespace {

std::string cell(const topology& t, int a, int b) { return t.classify(a, b).cell(); }
std::string gg(const topology& t, int i, int j) { return cell(t, t.gpu(i), t.gpu(j)); }
std::string gn(const topology& t, int i, int nic) { return cell(t, t.gpu(i), t.nics()[static_cast<std::size_t>(nic)]); }

// Every cell of the GPU+NIC matrix, row by row.
std::vector<std::string> all_cells(const topology& t) {
  std::vector<int> d = t.gpus(0);
  for (int n : t.nics(0)) d.push_back(n);
  std::vector<std::string> out;
  for (int a : d)
    for (int b : d) out.push_back(cell(t, a, b));
  return out;
}

// Expects collx::error(invalid_argument) whose message contains `where` (e.g. "x.txt:3:17:").
template <class F>
void expect_error(F&& f, const std::string& where, const std::string& what = "") {
  try {
    f();
    FAIL("no error; expected one at " << where);
  } catch (const collx::error& e) {
    INFO(e.what());
    CHECK(e.code() == collx::errc::invalid_argument);
    CHECK(std::string(e.what()).find(where) != std::string::npos);
    if (!what.empty()) CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
}

const char* const text_fixtures[] = {
    "a40x8-nvlink-bridged-pairs-llminsights-topo-m-abbrev.txt", "a800-sxm4-8gpu-nv8-4nic-topo-m.txt",
    "dgx-a100-640gb-llminsights-topo-m-abbrev.txt",             "dgx-h100-640gb-llminsights-topo-m-abbrev.txt",
    "v100-sxm2-8gpu-dgx1-like-oneflow-topo-m.txt",
};
const char* const xml_fixtures[] = {
    "dgx1-v100-como-nccl-topo.xml", "aws-p4d-24xlarge-nccl-topo.xml", "aws-p4de-24xlarge-nccl-topo.xml",
    "aws-p5-48xlarge-nccl-topo.xml", "azure-ndv2-nccl-topo.xml",     "azure-ndv4-nccl-topo.xml",
    "azure-ndv5-nccl-topo.xml",      "azure-ncv4-nccl-topo.xml",
};

}  // namespace

TEST_CASE("nvidia-smi: A800 with CRLF, a prompt line, NIC columns, NIC legend and affinity columns") {
  const topology t = read_nvidia_smi(topo_fixture("a800-sxm4-8gpu-nv8-4nic-topo-m.txt"), "a800");
  REQUIRE(t.gpus().size() == 8);
  REQUIRE(t.nics().size() == 4);
  CHECK(gg(t, 0, 7) == "NV8");
  CHECK(t.classify(t.gpu(0), t.gpu(7)).via_nvswitch);  // 7 peers x NV8 is more than any GPU has
  CHECK(gn(t, 1, 0) == "PIX");
  CHECK(gn(t, 0, 0) == "NODE");
  CHECK(gn(t, 7, 2) == "PIX");
  CHECK(gn(t, 7, 3) == "PIX");
  CHECK(gn(t, 0, 2) == "SYS");
  CHECK(cell(t, t.nics()[2], t.nics()[3]) == "PIX");
  CHECK(t.vertices[static_cast<std::size_t>(t.nics()[3])].device == "mlx5_3");
  CHECK(t.vertices[static_cast<std::size_t>(t.cpu_of(t.gpu(4)))].index == 1);  // NUMA Affinity column
  CHECK(t.vertices[static_cast<std::size_t>(t.cpu_of(t.gpu(4)))].cpu_affinity == "32-63,96-127");
  CHECK(std::string(t.vertices[static_cast<std::size_t>(t.gpu(0))].arch->name) == "A800");
}

TEST_CASE("nvidia-smi: DGX-1 cube mesh (V100) with an old-style mlx5_0 column and CPU Affinity") {
  const topology t = read_nvidia_smi(topo_fixture("v100-sxm2-8gpu-dgx1-like-oneflow-topo-m.txt"));
  REQUIRE(t.gpus().size() == 8);
  CHECK(gg(t, 0, 1) == "NV1");
  CHECK(gg(t, 0, 3) == "NV2");
  CHECK(gg(t, 0, 5) == "SYS");
  CHECK(gn(t, 2, 0) == "PIX");
  CHECK(gn(t, 0, 0) == "NODE");
  CHECK(gn(t, 4, 0) == "SYS");
  CHECK_FALSE(t.classify(t.gpu(0), t.gpu(3)).via_nvswitch);
  CHECK(std::string(t.vertices[static_cast<std::size_t>(t.gpu(0))].arch->name) == "V100");
  // The NVLink bond carries 2 x 25 GB/s per direction (V100 datasheet) and 80% of it is reachable.
  const int l = t.link_between(t.gpu(0), t.gpu(3), link_kind::nvlink);
  REQUIRE(l >= 0);
  CHECK(t.links[static_cast<std::size_t>(l)].spec_GBps == Approx(50.0));
  CHECK(t.links[static_cast<std::size_t>(l)].GBps == Approx(40.0));
}

TEST_CASE("nvidia-smi: abbreviated matrices ('...') and the GPU model hint") {
  const topology a100 = read_nvidia_smi(topo_fixture("dgx-a100-640gb-llminsights-topo-m-abbrev.txt"));
  CHECK(gg(a100, 2, 5) == "NV12");
  CHECK(a100.classify(a100.gpu(2), a100.gpu(5)).via_nvswitch);
  CHECK(std::string(a100.vertices[static_cast<std::size_t>(a100.gpu(0))].arch->name) == "A100");
  const topology a40 = read_nvidia_smi(topo_fixture("a40x8-nvlink-bridged-pairs-llminsights-topo-m-abbrev.txt"));
  CHECK(gg(a40, 0, 1) == "NV4");
  CHECK(gg(a40, 0, 2) == "NODE");
  CHECK(gg(a40, 0, 4) == "SYS");
  CHECK(std::string(a40.vertices[static_cast<std::size_t>(a40.gpu(0))].arch->name) == "A40");
  // The model can be given instead of inferred, and then no inference note is written.
  read_options o;
  o.gpu = find_gpu_arch("H100");
  const topology h = read_nvidia_smi(topo_fixture("dgx-h100-640gb-llminsights-topo-m-abbrev.txt"), "h100", o);
  CHECK(h.vertices[static_cast<std::size_t>(h.gpu(3))].arch == find_gpu_arch("H100"));
  for (const std::string& n : h.notes) CHECK(n.find("assumed from") == std::string::npos);
}

TEST_CASE("nvidia-smi: two NVSwitch islands with SYS between them keep their SYS paths") {
  // 16 GPUs in two trays of 8 (NV18 inside a tray, SYS across; synthetic). Before, every GPU with
  // an NV cell met in one switch: GPU7 -> GPU8 read as NV18 and rings were rated at NVLink speed.
  std::string m = "\t";
  for (int g = 0; g < 16; ++g) m += "GPU" + std::to_string(g) + "\t";
  m += "CPU Affinity\tNUMA Affinity\n";
  for (int a = 0; a < 16; ++a) {
    m += "GPU" + std::to_string(a);
    for (int b = 0; b < 16; ++b) m += a == b ? "\t X " : a / 8 == b / 8 ? "\tNV18" : "\tSYS";
    m += "\t" + std::to_string(a / 8) + "\t" + std::to_string(a / 8) + "\n";
  }
  const topology t = read_nvidia_smi(m, "two-trays");
  CHECK(cell(t, t.gpu(0), t.gpu(7)) == "NV18");
  CHECK(cell(t, t.gpu(8), t.gpu(15)) == "NV18");
  CHECK(cell(t, t.gpu(7), t.gpu(8)) == "SYS");
  CHECK(cell(t, t.gpu(0), t.gpu(15)) == "SYS");
  CHECK(t.classify(t.gpu(1), t.gpu(6)).via_nvswitch);
  CHECK_FALSE(t.classify(t.gpu(1), t.gpu(9)).via_nvswitch);
}

TEST_CASE("nvidia-smi: the same matrix pasted differently reads the same") {
  const std::string crlf = topo_fixture("a800-sxm4-8gpu-nv8-4nic-topo-m.txt");
  const std::vector<std::string> ref = all_cells(read_nvidia_smi(crlf));
  std::string lf = std::regex_replace(crlf, std::regex("\r"), "");
  std::string spaces = std::regex_replace(lf, std::regex("\t"), "  ");
  std::string hashed = std::regex_replace(lf, std::regex("(^|\n)"), "$1# ");
  std::string dollar = "$ nvidia-smi topo -m\n" + lf.substr(lf.find('\n') + 1);
  std::string ranked = std::regex_replace(lf, std::regex("(^|\n)"), "$010: ");
  // Line ends as classic Mac editors save them (a lone CR: it read as one line, "column twice"),
  // and CRLF converted twice (CRCRLF).
  std::string cr = std::regex_replace(lf, std::regex("\n"), "\r");
  std::string crcrlf = std::regex_replace(lf, std::regex("\n"), "\r\r\n");
  for (const std::string* v : {&lf, &spaces, &hashed, &dollar, &ranked, &cr, &crcrlf})
    CHECK(all_cells(read_nvidia_smi(*v)) == ref);
  // The shell's next prompt, as a terminal copy ends (it was "unexpected text after the matrix").
  for (const char* prompt : {"$ ", "user@host:~$ ", "[root@gpu01 ~]# ", "PS C:\\> ", "host% "}) {
    INFO(prompt);
    CHECK(all_cells(read_nvidia_smi(lf + prompt + "\n\n")) == ref);
  }
  // Only as the last line: text after it is still refused.
  expect_error([&] { read_nvidia_smi(lf + "user@host:~$\nmore\n", "m.txt"); }, "m.txt:", "unexpected text after the matrix: 'user@host:~$'");
  // Errors name the same line whatever ends the lines.
  const std::string bad = "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \tSYS\n";
  for (const char* end : {"\n", "\r\n", "\r"})
    expect_error([&] { read_nvidia_smi(std::regex_replace(bad, std::regex("\n"), end), "m.txt"); }, "m.txt:3:");
}

TEST_CASE("nvidia-smi: writing a topology and reading it back gives the same cells") {
  for (const char* f : text_fixtures) {
    INFO(f);
    const topology t = read_topology(topo_fixture(f), f);
    const std::string text = format_nvidia_smi(t);
    CHECK(all_cells(read_nvidia_smi(text)) == all_cells(t));
  }
  for (const char* f : xml_fixtures) {
    INFO(f);
    const topology t = read_topology(topo_fixture(f), f);
    CHECK(all_cells(read_nvidia_smi(format_nvidia_smi(t))) == all_cells(t));
  }
}

TEST_CASE("nvidia-smi: text it cannot understand is an error naming line and column") {
  const std::string good =
      "\tGPU0\tGPU1\tNIC0\n"
      "GPU0\t X \tNV2\tPIX\n"
      "GPU1\tNV2\t X \tPHB\n"
      "NIC0\tPIX\tPHB\t X \n";
  REQUIRE_NOTHROW(read_nvidia_smi(good, "m.txt"));
  // UTF-16 (PowerShell's `>`): it read as a matrix header of "\xff\xfe\t\x00G...", unexplained.
  const auto utf16 = [](const std::string& ascii, bool bom) {
    std::string u = bom ? std::string("\xFF\xFE", 2) : std::string();
    for (char c : ascii) u += std::string{c, '\0'};
    return u;
  };
  for (bool bom : {true, false}) {
    expect_error([&] { read_nvidia_smi(utf16(good, bom), "m.txt"); }, "m.txt:", "UTF-16");
    expect_error([&] { read_nccl_topology(utf16("<system version=\"1\"></system>", bom), "t.xml"); }, "t.xml:", "iconv -f UTF-16");
    expect_error([&] { read_nccl_tests(utf16("# nThread 1\n", bom), "p.txt"); }, "p.txt:", "UTF-16");
  }
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNVX\nGPU1\tNV2\t X \n", "m.txt"); }, "m.txt:2:10:", "NVX");
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV1\t X \n", "m.txt"); }, "m.txt:3:6:", "not symmetric");
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV2\n", "m.txt"); }, "m.txt:", "rows");
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tX\nGPU1\tX\t X \n", "m.txt"); }, "m.txt:2:10:", "X off the diagonal");
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV2\tSYS\nGPU1\tNV2\t X \n", "m.txt"); }, "m.txt:2:14:", "extra cell");
  expect_error([] { read_nvidia_smi("hello\n", "m.txt"); }, "m.txt:1:1:", "header");
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU1\t X \tNV2\n", "m.txt"); }, "m.txt:2:1:", "expected row 'GPU0'");
  // PIX, PIX and PXB cannot all hold in one PCIe tree.
  expect_error(
      [] {
        read_nvidia_smi("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\tPXB\nGPU1\tPIX\t X \tPIX\nGPU2\tPXB\tPIX\t X \n", "m.txt");
      },
      "m.txt:2:14:", "no PCIe tree");
  // SYS between devices that other cells put on one NUMA node.
  expect_error(
      [] {
        read_nvidia_smi("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNODE\tSYS\nGPU1\tNODE\t X \tNODE\nGPU2\tSYS\tNODE\t X \n", "m.txt");
      },
      "m.txt:2:15:", "SYS between GPU0 and GPU2, but other cells");
  // SYS between GPUs of one affinity (a VM giving every GPU the same CPUs): the affinity is named,
  // not "other cells".
  expect_error(
      [] {
        read_nvidia_smi("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-47\nGPU1\tSYS\t X \t0-47\n", "m.txt");
      },
      "m.txt:2:10:", "SYS between GPU0 and GPU1, but both have CPU affinity 0-47 (one NUMA node)");
  // Affinities that disagree for GPUs joined through a NIC (each GPU is PIX with it, NVLink between
  // them): the NUMA node took one of the two silently.
  expect_error(
      [] {
        read_nvidia_smi("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"
                        "GPU0\t X \tNV2\tPIX\t0-7\t0\n"
                        "GPU1\tNV2\t X \tPIX\t8-15\t1\n"
                        "NIC0\tPIX\tPIX\t X \n",
                        "m.txt");
      },
      "m.txt:2:10:", "GPU0 and GPU1 have different affinity, but other cells place them on one NUMA node");
  expect_error([&] { read_nvidia_smi(good + "\nsomething else\n", "m.txt"); }, "m.txt:6:1:", "unexpected text");
  // Numbers too large for the format: a collx::error with line and column, not std::stoi's
  // out_of_range; a CPU range that would take gigabytes is not a CPU list.
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV999999999999\nGPU1\tNV2\t X \n", "m.txt"); }, "m.txt:2:10:", "NV999999999999");
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU99999999999\nGPU0\t X \tNV2\nGPU99999999999\tNV2\t X \n", "m.txt"); }, "m.txt:1:7:", "too large");
  expect_error([] { read_nvidia_smi("\tGPU0\tCPU Affinity\nGPU0\t X \t0-99999999999\n", "m.txt"); }, "m.txt:2:", "not a CPU list");
  CHECK(parse_cpulist("0-65535").size() == 65536);
  CHECK(parse_cpulist("0-65536").empty());
  CHECK(parse_cpulist("0-99999999999").empty());
  // Ascending, each CPU once, and bounded whatever the text repeats (a fuzzer's 96 KB of "0-65535,"
  // took 4 GB when every range was listed out).
  CHECK(parse_cpulist("0-11,0-3,5,5,5").size() == 12);
  CHECK(parse_cpulist("8,2-3,0") == std::vector<int>{0, 2, 3, 8});
  {
    std::string many;
    for (int k = 0; k < 20000; ++k) many += "0-65535,";
    CHECK(parse_cpulist(many + "7").size() == 65536);
  }
  // NVLink counts no GPU has (their bandwidths overflowed), and one device under two names.
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV999999\nGPU1\tNV999999\t X \n", "m.txt"); }, "m.txt:2:",
               "more NVLinks than any GPU has");
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV99999999\nGPU1\tNV99999999\t X \n", "m.txt"); }, "m.txt:2:",
               "'NV99999999': more NVLinks than any GPU has");  // too long for a number: too many links too
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV0\nGPU1\tNV0\t X \n", "m.txt"); }, "m.txt:2:",
               "'NV0': a pair joined by NVLink has at least one");
  expect_error([] { read_nvidia_smi("\tGPU0\tGPU00\nGPU0\t X \tNV2\nGPU00\tNV2\t X \n", "m.txt"); }, "m.txt:1:",
               "is device 0 again (as 'GPU0')");
  // A byte order mark before the text (files saved by Windows editors) is skipped.
  CHECK(all_cells(read_topology("\xEF\xBB\xBF" + good, "bom.txt")) == all_cells(read_nvidia_smi(good)));
}

TEST_CASE("NCCL topology XML: DGX-1 with NVLink counts, PLX switches, NICs with and without PCI") {
  const topology t = read_nccl_topology(topo_fixture("dgx1-v100-como-nccl-topo.xml"), "dgx1");
  REQUIRE(t.gpus().size() == 8);
  REQUIRE(t.nics().size() == 3);
  CHECK(gg(t, 0, 1) == "NV1");
  CHECK(gg(t, 0, 3) == "NV2");
  CHECK(gg(t, 0, 4) == "NV2");
  CHECK(gg(t, 0, 5) == "SYS");
  CHECK(gg(t, 0, 6) == "SYS");
  CHECK(t.pcie_class(t.gpu(0), t.gpu(1)) == path_type::pix);   // same PLX 8764
  CHECK(t.pcie_class(t.gpu(0), t.gpu(2)) == path_type::node);  // other switch, same CPU
  CHECK(gn(t, 0, 0) == "NODE");
  CHECK(t.vertices[static_cast<std::size_t>(t.nics()[0])].device == "enp1s0f0");
  CHECK(t.vertices[static_cast<std::size_t>(t.nics()[0])].nic_Gbps == Approx(1.0));
  CHECK(t.vertices[static_cast<std::size_t>(t.cpu_of(t.gpu(0)))].cpu_affinity == "0-19,40-59");
  // Each GPU has 6 NVLinks (2 x NV1 + 2 x NV2).
  for (int g : t.gpus()) {
    int links = 0;
    for (int l : t.incident(g))
      if (t.links[static_cast<std::size_t>(l)].kind == link_kind::nvlink) links += t.links[static_cast<std::size_t>(l)].count;
    CHECK(links == 6);
  }
  // Broadwell (model 79) QPI: NCCL's 6 GB/s.
  const int smp = t.link_between(t.cpu_of(t.gpu(0)), t.cpu_of(t.gpu(5)), link_kind::smp);
  REQUIRE(smp >= 0);
  CHECK(t.links[static_cast<std::size_t>(smp)].GBps == Approx(6.0));
}

TEST_CASE("NCCL topology XML: static cloud files and their edge cases") {
  const topology p5 = read_nccl_topology(topo_fixture("aws-p5-48xlarge-nccl-topo.xml"));
  CHECK(p5.gpus().size() == 8);
  CHECK(p5.nics().size() == 32);
  CHECK(gn(p5, 0, 3) == "PIX");
  CHECK(gn(p5, 0, 4) == "NODE");
  CHECK(p5.vertices[static_cast<std::size_t>(p5.nics()[0])].nic_Gbps == Approx(100.0));
  CHECK(p5.links[static_cast<std::size_t>(p5.parent_link(p5.gpu(0)))].generation == 5);  // "32.0 GT/s PCIe"
  {  // A --gpu whose sm is not the file's: modelled as asked, with one note saying the file disagrees;
     // another model of the file's sm (A800 for sm 80) is no disagreement.
    read_options v100, a800;
    v100.gpu = find_gpu_arch("V100");
    a800.gpu = find_gpu_arch("A800");
    const topology as_v100 = read_nccl_topology(topo_fixture("aws-p5-48xlarge-nccl-topo.xml"), "p5", v100);
    CHECK(as_v100.vertices[static_cast<std::size_t>(as_v100.gpu(0))].arch == v100.gpu);
    CHECK(std::count(as_v100.notes.begin(), as_v100.notes.end(),
                     "--gpu V100 given (sm 70), but the file's GPUs are sm 90 (H100 class): modelled as V100, as asked") == 1);
    for (const std::string& n : read_nccl_topology(topo_fixture("azure-ncv4-nccl-topo.xml"), "ncv4", a800).notes)
      CHECK(n.find("given (sm") == std::string::npos);
    // A malformed sm is an error only where it would be used: with --gpu it is not.
    const std::string bad_sm = std::regex_replace(topo_fixture("aws-p5-48xlarge-nccl-topo.xml"), std::regex("sm=\"90\""), "sm=\"9x\"");
    CHECK(read_nccl_topology(bad_sm, "p5", v100).gpus().size() == 8);
    CHECK_THROWS_AS(read_nccl_topology(bad_sm, "p5"), collx::error);
  }
  const topology p4 = read_nccl_topology(topo_fixture("aws-p4d-24xlarge-nccl-topo.xml"));
  CHECK(gg(p4, 0, 1) == "PIX");
  CHECK(gg(p4, 1, 2) == "NODE");
  CHECK(gg(p4, 3, 4) == "SYS");
  CHECK(p4.vertices[static_cast<std::size_t>(p4.gpu(0))].arch == find_gpu_arch("A100"));  // PCI id 0x20b0
  // The file leaves NVLink out (the machine has NVSwitch): a note says so and names the fix; the
  // DGX-1 file, which lists its NVLinks, gets no such note.
  const auto says_no_nvlink = [](const topology& t) {
    for (const std::string& n : t.notes)
      if (n.find("no NVLink listed") != std::string::npos && n.find("--nvswitch 12") != std::string::npos) return true;
    return false;
  };
  CHECK(says_no_nvlink(p4));
  topology p4_switched = p4;  // once the fabric is added, the note would contradict it
  add_nvswitch(p4_switched, 12);
  CHECK_FALSE(says_no_nvlink(p4_switched));
  CHECK_FALSE(says_no_nvlink(read_nccl_topology(topo_fixture("dgx1-v100-como-nccl-topo.xml"))));
  // Not for GPUs of unknown model, nor for nvidia-smi text (which prints NVLinks where there are some).
  CHECK_FALSE(says_no_nvlink(read_nccl_topology(topo_fixture("azure-ndv4-nccl-topo.xml"))));
  read_options a100;
  a100.gpu = find_gpu_arch("A100");
  CHECK_FALSE(says_no_nvlink(read_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n", "pcie.txt", a100)));
  // NC A100 v4: each GPU lists an NVLink to itself (count 12) and link_speed="": noted, not linked.
  const topology nc = read_nccl_topology(topo_fixture("azure-ncv4-nccl-topo.xml"));
  CHECK(gg(nc, 0, 1) == "SYS");
  bool noted = false;
  for (const std::string& n : nc.notes) noted |= n.find("NVLink to itself") != std::string::npos;
  CHECK(noted);
  // g5: a skeleton without any GPU or class: read, with notes, and no GPU.
  const topology g5 = read_nccl_topology(topo_fixture("aws-g5-48xlarge-nccl-topo.xml"));
  CHECK(g5.gpus().empty());
  CHECK_FALSE(g5.notes.empty());
}

TEST_CASE("NCCL XML: a GPU model not known from sm or device id gets one note saying what was tried") {
  const auto notes_of = [](const char* gpu_attrs, const char* pci_attrs) {
    const std::string xml = std::string("<system version=\"1\">\n <cpu numaid=\"0\" arch=\"x86_64\">\n  <pci busid=\"0000:4f:00.0\" "
                                        "class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\" ") +
                            pci_attrs + ">\n   <gpu dev=\"0\" " + gpu_attrs + "/>\n  </pci>\n </cpu>\n</system>\n";
    std::string all;
    for (const std::string& n : read_nccl_topology(xml, "t.xml").notes)
      if (n.find("GPU 0000:4f:00.0: model") != std::string::npos || n.find("sm ") != std::string::npos) all += n + "\n";
    return all;
  };
  // Before: "sm 999 not known; generic figures used" and "model unknown (no sm, ...)" side by side.
  const std::string unknown = notes_of("sm=\"999\"", "");
  INFO(unknown);
  CHECK(unknown.find("model unknown (sm 999 not known)") != std::string::npos);
  CHECK(unknown.find("no sm") == std::string::npos);
  CHECK(std::count(unknown.begin(), unknown.end(), '\n') == 1);
  // An unknown sm with a known PCI device id (A100 SXM4 0x20b0): the model, and what was not known.
  const std::string by_id = notes_of("sm=\"999\"", "device=\"0x20b0\"");
  INFO(by_id);
  CHECK(by_id.find("from PCI device id 0x20b0 (sm 999 not known)") != std::string::npos);
  CHECK(by_id.find("generic") == std::string::npos);
  const std::string neither = notes_of("", "device=\"0x1234\"");
  CHECK(neither.find("model unknown (PCI device id 0x1234 not known)") != std::string::npos);
  CHECK(notes_of("", "").find("model unknown (no sm, no PCI device id)") != std::string::npos);
}

TEST_CASE("NCCL XML: forms NCCL itself writes: POWER9 NVLink to a CPU, Grace Hopper <c2c>, <pcilink>, class 0x03") {
  // Each was an error: tclass 0x068001 "is not a GPU, NVSwitch or CPU", "unexpected <c2c> inside
  // <gpu>", "unexpected <pcilink> inside a PCI bridge", and class "0x03" an ignored device.
  const auto nvlink_to_cpu = [](const topology& t, int gpu) -> const collx::topo::link* {
    for (const collx::topo::link& l : t.links)
      if (l.kind == link_kind::nvlink && ((l.a == gpu && l.b == t.cpu_of(gpu)) || (l.b == gpu && l.a == t.cpu_of(gpu)))) return &l;
    return nullptr;
  };
  // POWER9 (AC922): each V100 has 3 NVLinks to its CPU, which NCCL's file marks tclass 0x068001.
  const topology p9 = read_nccl_topology(
      "<system version=\"1\"><cpu numaid=\"0\" arch=\"ppc64\">\n"
      " <pci busid=\"0004:04:00.0\" class=\"0x030200\" link_speed=\"8 GT/s\" link_width=\"16\">\n"
      "  <gpu dev=\"0\" sm=\"70\"><nvlink target=\"0004:05:00.0\" count=\"3\" tclass=\"0x030200\"/>"
      "<nvlink target=\"ffff:ff:ff.0\" count=\"3\" tclass=\"0x068001\"/></gpu></pci>\n"
      " <pci busid=\"0004:05:00.0\" class=\"0x030200\" link_speed=\"8 GT/s\" link_width=\"16\">\n"
      "  <gpu dev=\"1\" sm=\"70\"><nvlink target=\"0004:04:00.0\" count=\"3\" tclass=\"0x030200\"/>"
      "<nvlink target=\"ffff:ff:ff.0\" count=\"3\" tclass=\"0x068001\"/></gpu></pci>\n"
      "</cpu></system>\n",
      "p9.xml");
  REQUIRE(p9.gpus().size() == 2);
  for (int g : {0, 1}) {
    const collx::topo::link* l = nvlink_to_cpu(p9, p9.gpu(g));
    REQUIRE(l != nullptr);
    CHECK(l->count == 3);
  }
  // Grace Hopper: <c2c bw="46800" count="10"/>, 46.8 GB/s per link (NCCL: bw x count / 1000).
  const topology gh = read_nccl_topology(
      "<system version=\"1\"><cpu numaid=\"0\" arch=\"arm64\">\n"
      " <pci busid=\"0009:01:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
      "  <gpu dev=\"0\" sm=\"90\"><c2c bw=\"46800\" count=\"10\"/></gpu></pci>\n"
      "</cpu></system>\n",
      "gh.xml");
  const collx::topo::link* c2c = nvlink_to_cpu(gh, gh.gpu(0));
  REQUIRE(c2c != nullptr);
  CHECK(c2c->GBps == Approx(468.0));
  CHECK(c2c->count == 10);
  // <pcilink> between two switches: read, noted as not modelled; class "0x03": a GPU.
  const topology pl = read_nccl_topology(
      "<system version=\"1\"><cpu numaid=\"0\">\n"
      " <pci busid=\"0000:03:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
      "  <pcilink target=\"0000:82:00.0\"/>\n"
      "  <pci busid=\"0000:06:00.0\" class=\"0x03\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"0\" sm=\"90\"/></pci>\n"
      " </pci>\n"
      "</cpu></system>\n",
      "pl.xml");
  CHECK(pl.gpus().size() == 1);
  CHECK(std::any_of(pl.notes.begin(), pl.notes.end(), [](const std::string& n) {
    return n.find("<pcilink>") != std::string::npos && n.find("0000:82:00.0") != std::string::npos && n.find("not modelled") != std::string::npos;
  }));
  // Short classes are prefixes, as NCCL reads them: "0x0302" is a GPU too, "0x0604" a bridge.
  const topology short_classes = read_nccl_topology(
      "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:03:00.0\" class=\"0x0604\">"
      "<pci busid=\"0000:06:00.0\" class=\"0x0302\"><gpu dev=\"0\" sm=\"80\"/></pci></pci></cpu></system>",
      "s.xml");
  CHECK(short_classes.gpus().size() == 1);
  expect_error([] { read_nccl_topology("<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x0302001\"/></cpu></system>", "t.xml"); },
               "t.xml:1:", "is not a PCI class");
}

TEST_CASE("readers: inputs whose model would grow with the square of a count are refused, quickly") {
  // Found by fuzzing: a 52 KB header of 9000 columns took 3.8 GB (a devices x devices matrix is
  // made before any row), 10,000 <cpu/> 7 GB (every pair of CPUs gets a link).
  std::string header;
  for (int g = 0; g <= 1024; ++g) header += "\tGPU" + std::to_string(g);
  expect_error([&] { read_nvidia_smi(header + "\n", "wide.txt"); }, "wide.txt:1:", "more than 1024 device columns");
  std::string cpus = "<system>\n";
  for (int c = 0; c <= 256; ++c) cpus += "<cpu/>\n";
  expect_error([&] { read_nccl_topology(cpus + "</system>\n", "cpus.xml"); }, "cpus.xml:258:1:", "more than 256 <cpu> elements");
}

TEST_CASE("NCCL XML: input it cannot understand is an error naming line and column") {
  expect_error([] { read_nccl_topology("<system>\n  <cpu numaid=\"0\">\n</system>\n", "t.xml"); }, "t.xml:3:1:", "closes <cpu>");
  expect_error([] { read_nccl_topology("<system>\n  <gpu/>\n</system>\n", "t.xml"); }, "t.xml:2:3:", "unexpected <gpu>");
  expect_error([] { read_nccl_topology("<system>\n <cpu numaid=\"x1\"/>\n</system>", "t.xml"); }, "t.xml:2:7:", "not a number");
  expect_error([] { read_nccl_topology("<system><cpu numaid=\"0\" numaid=\"1\"/></system>", "t.xml"); }, "t.xml:1:25:", "duplicate");
  expect_error([] { read_nccl_topology(std::string("<system><cpu numaid=\"1\0x\"/></system>", 36), "t.xml"); }, "t.xml:1:14:",
               "not a number");  // a NUL byte inside a value
  expect_error([] { read_nccl_topology("<system>text</system>", "t.xml"); }, "t.xml:1:9:", "text");
  expect_error(
      [] {
        read_nccl_topology(
            "<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\">\n"
            "  <gpu dev=\"0\" sm=\"80\"><nvlink target=\"0000:02:00.0\" count=\"2\" tclass=\"0x030200\"/></gpu>\n"
            "</pci></cpu></system>",
            "t.xml");
      },
      "t.xml:3:24:", "not a GPU in this file");
  {  // an affinity mask with a CPU past 65535 (it showed as "0 CPUs")
    const std::string wide = "<system><cpu numaid=\"0\" affinity=\"1" + std::string(16384, '0') + "\"/></system>";
    expect_error([&] { read_nccl_topology(wide, "t.xml"); }, "t.xml:1:", "names CPUs past 65535");
  }
  // PCI classes and device ids are never negative (tclass="-1" printed as ffffffffffffffff).
  for (const char* tc : {"-1", "0x1000000"})
    expect_error(
        [tc] {
          read_nccl_topology(std::string("<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\">\n"
                                         "  <gpu dev=\"0\" sm=\"80\"><nvlink target=\"0000:02:00.0\" count=\"2\" tclass=\"") +
                                 tc + "\"/></gpu>\n</pci></cpu></system>",
                             "t.xml");
        },
        "t.xml:3:64:", "is not a PCI class (0x and up to 6 hex digits)");
  expect_error([] { read_nccl_topology("<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"-0x30200\"/></cpu></system>", "t.xml"); },
               "t.xml:1:", "is not a PCI class");
  expect_error([] { read_nccl_graph("<graphs><graph id=\"0\" pattern=\"4\" nchannels=\"2\"><channel><gpu dev=\"0\"/></channel></graph></graphs>", "g.xml"); },
               "g.xml:1:9:", "nchannels");
  expect_error([] { read_nccl_graph("<graphs><graph id=\"0\" pattern=\"4\" nchannels=\"1\">\n<channel><gpu dev=\"0\"/><gpu dev=\"0\"/></channel></graph></graphs>", "g.xml"); },
               "g.xml:2:24:", "twice");
  expect_error([] { read_topology("<graphs/>", "g.xml"); }, "g.xml:1:1:", "graph file");
  // Lines end at LF, CRLF, CRCRLF or a lone CR alike: the error is on line 3 in each.
  for (const char* end : {"\n", "\r\n", "\r\r\n", "\r"})
    expect_error([&] { read_nccl_topology(std::string("<system>") + end + "  <cpu numaid=\"0\">" + end + "</system>" + end, "t.xml"); },
                 "t.xml:3:1:", "closes <cpu>");
  {  // and a file saved with lone CRs reads as the LF one does
    const std::string lf = topo_fixture("dgx1-v100-como-nccl-topo.xml");
    std::string cr = lf;
    std::replace(cr.begin(), cr.end(), '\n', '\r');
    CHECK(all_cells(read_topology(cr)) == all_cells(read_topology(lf)));
  }
  // A path where the contents belong: said so, rather than a parse error at the first character.
  expect_error([] { read_topology("/data/dgx1-nccl-topo.xml"); }, "read_topology takes the topology's text, not a path",
               "'/data/dgx1-nccl-topo.xml'");
  // A count past int's range is an error, not a wrapped count (4294967298 would read as 2).
  expect_error(
      [] {
        read_nccl_topology(
            "<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\">\n"
            "  <gpu dev=\"0\" sm=\"80\"><nvlink target=\"0000:02:00.0\" count=\"4294967298\" tclass=\"0x030200\"/></gpu>\n"
            "</pci></cpu></system>",
            "t.xml");
      },
      "t.xml:3:", "out of range");
  // An NVLink count no GPU has (2 x 2e9 overflowed an int on its way to the NVSwitch), a bus id
  // twice (two GPUs were read, NVLinks going to the last), a bus id that is not one.
  expect_error(
      [] {
        read_nccl_topology(
            "<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\">\n"
            "  <gpu dev=\"0\" sm=\"80\"><nvlink target=\"0000:ff:00.0\" count=\"2000000000\" tclass=\"0x068000\"/></gpu>\n"
            "</pci></cpu></system>",
            "t.xml");
      },
      "t.xml:3:", "outside 1 to 64");
  {  // NVLink counts that differ per side take the larger; a GPU left with more links than its model
     // has is said in a note (it was taken silently), a GPU within its count is not.
    auto file = [](int to_switch) {
      return "<system><cpu numaid=\"0\">\n"
             "<pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu dev=\"0\" sm=\"80\">"
             "<nvlink target=\"0000:02:00.0\" count=\"8\" tclass=\"0x030200\"/>" +
             (to_switch ? "<nvlink target=\"0000:ff:00.0\" count=\"" + std::to_string(to_switch) + "\" tclass=\"0x068000\"/>" : std::string()) +
             "</gpu></pci>\n<pci busid=\"0000:02:00.0\" class=\"0x030200\"><gpu dev=\"1\" sm=\"80\">"
             "<nvlink target=\"0000:01:00.0\" count=\"2\" tclass=\"0x030200\"/></gpu></pci>\n</cpu></system>";
    };
    auto notes_with = [](const topology& t, const std::string& what) {
      return std::count_if(t.notes.begin(), t.notes.end(), [&](const std::string& n) { return n.find(what) != std::string::npos; });
    };
    const topology within = read_nccl_topology(file(4), "t.xml");  // GPU0: 8 + 4, GPU1: 8 (widened from 2)
    CHECK(notes_with(within, "differs per side: the larger used") == 1);
    CHECK(notes_with(within, "GPUs have at most") == 0);
    const topology over = read_nccl_topology(file(6), "t.xml");  // GPU0: 8 + 6 > an A100's 12
    INFO(over.notes.size());
    CHECK(notes_with(over, "GPUs have at most") == 1);
    CHECK(notes_with(over, "has 14 NVLinks to GPUs and NVSwitches in this file, but A100 GPUs have at most 12") == 1);
    CHECK(notes_with(within, "only") == 0);
    // A link one side does not list (NCCL's dumps list both ends): used, and said.
    std::string one_sided = file(0);
    one_sided.erase(one_sided.rfind("<nvlink"), one_sided.rfind("</gpu>") - one_sided.rfind("<nvlink"));
    const topology t = read_nccl_topology(one_sided, "t.xml");
    CHECK(notes_with(t, "NVLink between GPU0 and GPU1 listed by GPU0 only: used as listed") == 1);
    CHECK(t.links.size() == within.links.size() - 1);  // no NVSwitch link; the GPU pair's is there
  }
  const std::string two_gpus_one_busid = "<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu dev=\"0\" sm=\"80\"/></pci>\n"
                                         "<pci busid=\"0000:01:00.0\" class=\"0x030200\"><gpu dev=\"1\" sm=\"80\"/></pci>\n</cpu></system>";
  expect_error([&] { read_nccl_topology(two_gpus_one_busid, "t.xml"); }, "t.xml:3:", "PCI bus id 0000:01:00.0 appears twice");
  expect_error([] { read_nccl_topology("<system><cpu numaid=\"0\"><pci busid=\"zz\" class=\"0x030200\"><gpu dev=\"0\" sm=\"80\"/></pci></cpu></system>", "t.xml"); },
               "t.xml:1:", "is not a PCI bus id");
  // Graph device numbers: decimal, or hex after 0x; "010" is 10 (strtoull's base 0 read it as
  // octal 8), and signs or blanks are not numbers.
  CHECK(read_nccl_graph("<graphs><graph id=\"0\" pattern=\"4\" nchannels=\"1\"><channel><gpu dev=\"010\"/><gpu dev=\"0x1f\"/></channel>"
                        "</graph></graphs>",
                        "g.xml")
            .at(0)
            .channels.at(0)
            .gpus == std::vector<int>{10, 31});
  for (const char* bad : {"+1", " 2", "0x", "1a", "-0"})
    expect_error([&] { read_nccl_graph(std::string("<graphs><graph id=\"0\" pattern=\"4\" nchannels=\"1\"><channel><gpu dev=\"") + bad +
                                       "\"/></channel></graph></graphs>", "g.xml"); },
                 "g.xml:1:", "is not a device number");
  // Ids, widths and speeds no machine has: errors, not GPU-1, a second CPU0 or an unknown width.
  expect_error([] { read_nccl_topology("<system><cpu numaid=\"0\"/>\n<cpu numaid=\"0\"/></system>", "t.xml"); }, "t.xml:2:1:",
               "a second <cpu> with numaid 0");
  expect_error([] { read_nccl_topology("<system><cpu numaid=\"-2\"/></system>", "t.xml"); }, "t.xml:1:14:", "outside -1 to 4095");
  // What NCCL writes where Linux knows no better: numaid -1 (one NUMA node, VMs), link_speed
  // "Unknown", link_width 255; graph device numbers in hex. Read as unknown, not refused.
  CHECK_NOTHROW(read_nccl_topology("<system><cpu numaid=\"-1\"/><cpu/></system>", "t.xml"));
  CHECK_NOTHROW(read_nccl_topology("<system><cpu numaid=\"1\"/><cpu/></system>", "t.xml"));  // the second is index 1 too, unnamed
  {
    // As if the file gave neither (whatever the reader assumes then).
    const auto with = [](const std::string& attrs) {
      const topology u = read_nccl_topology("<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\"" + attrs +
                                                "><gpu dev=\"0\" sm=\"80\"/></pci></cpu></system>",
                                            "t.xml");
      const collx::topo::link& up = u.links[static_cast<std::size_t>(u.parent_link(u.gpu(0)))];
      return std::pair{up.generation, up.width};
    };
    CHECK(with(" link_speed=\"Unknown speed\" link_width=\"255\"") == with(""));
    CHECK(with(" link_speed=\"Unknown\"") == with(""));
    CHECK(with(" link_speed=\"16.0 GT/s PCIe\" link_width=\"8\"") == std::pair{4, 8});
  }
  CHECK(read_nccl_graph("<graphs><graph id=\"0\" pattern=\"4\" nchannels=\"1\"><channel><gpu dev=\"0x0\"/><gpu dev=\"0x1\"/></channel>"
                        "</graph></graphs>",
                        "g.xml")
            .at(0)
            .channels.at(0)
            .gpus == std::vector<int>{0, 1});
  expect_error(
      [] {
        read_nccl_topology("<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_width=\"-16\"/></cpu></system>",
                           "t.xml");
      },
      "t.xml:2:", "outside 0 to 255");
  expect_error(
      [] {
        read_nccl_topology("<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\">"
                           "<gpu dev=\"-1\" sm=\"80\"/></pci></cpu></system>",
                           "t.xml");
      },
      "t.xml:2:", "outside 0 to 4095");
  // Input quoted in a message is made printable and cut short: binary junk, a megabyte line; a
  // backslash doubled, so that text reading \x41 stays apart from an escaped byte.
  CHECK(collx::topo::detail::printable("a\\x41\x01") == "a\\\\x41\\x01");
  for (const std::string& junk : {std::string("\x7f\x01\xfe\x1b[31m<system/>", 14), std::string(1 << 20, 'x')})
    for (const auto& read : {+[](const std::string& t) { (void)read_topology(t, "j.txt"); },
                             +[](const std::string& t) { (void)read_nccl_tests(t, "j.txt"); }}) {
      try {
        read(junk);
        FAIL("junk read without an error");
      } catch (const collx::error& e) {
        const std::string m = e.what();
        INFO(m.substr(0, 200));
        CHECK(m.size() < 700);
        CHECK(std::none_of(m.begin(), m.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f; }));
      }
    }
  // A link speed no PCIe link has (inf, nan, 0, negative) is an error, not Gen6 or Gen1.
  for (const char* speed : {"inf GT/s", "nan GT/s", "0 GT/s", "-8 GT/s", "1e308 GT/s"})
    expect_error(
        [&] {
          read_nccl_topology(std::string("<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"") +
                                 speed + "\" link_width=\"16\"/>\n</cpu></system>",
                             "t.xml");
        },
        "t.xml:2:", "outside 2 to 128 GT/s");
  // Nesting past max_xml_depth is an error, not a stack overflow (50,000 levels crashed the reader).
  std::string deep = "<system>";
  for (int k = 0; k < 50000; ++k) deep += "<cpu numaid=\"0\">";
  expect_error([&] { read_nccl_topology(deep, "t.xml"); }, "t.xml:1:1017:", "nested more than 64 levels deep");
  // 64 levels, the root's included, are read.
  std::string levels;
  for (int k = 0; k < 64; ++k) levels += "<a>";
  for (int k = 0; k < 64; ++k) levels += "</a>";
  CHECK_NOTHROW(collx::topo::detail::parse_xml(levels, "a.xml"));
  expect_error([&] { collx::topo::detail::parse_xml("<a>" + levels + "</a>", "a.xml"); }, "a.xml:1:193:", "more than 64 levels");
}

TEST_CASE("NCCL graph XML: the DGX-1's six rings and NC A100 v4's rings and trees") {
  const std::vector<nccl_graph> g = read_nccl_graph(topo_fixture("dgx1-v100-como-8gpu-nccl-graph.xml"));
  REQUIRE(g.size() == 3);
  CHECK(g[0].pattern == 4);
  CHECK(nccl_pattern_name(g[0].pattern) == "ring");
  CHECK(g[0].speed_intra == 22);
  CHECK(g[0].type_intra == "NVL");
  REQUIRE(g[0].channels.size() == 6);
  CHECK(g[0].channels[0].gpus == std::vector<int>{0, 3, 2, 1, 5, 6, 7, 4});
  CHECK(g[0].channels[5].gpus == std::vector<int>{0, 2, 6, 4, 5, 7, 3, 1});
  const std::vector<nccl_graph> nc = read_nccl_graph(topo_fixture("azure-ncv4-nccl-graph.xml"));
  REQUIRE(nc.size() == 3);
  CHECK(nc[0].channels.size() == 2);
  CHECK(nc[1].channels.size() == 4);
  CHECK(nc[1].channels[1].gpus == std::vector<int>{1, 0, 3, 2});
}

TEST_CASE("nccl-tests tables: every fixture's peak busbw and command line") {
  {  // A byte order mark before the table is skipped.
    const std::string text = topo_fixture("dgx-h100-640gb-4gpu-allreduce-perf.txt");
    CHECK(read_nccl_tests("\xEF\xBB\xBF" + text, "bom.txt").rows.size() == read_nccl_tests(text).rows.size());
    CHECK_FALSE(read_nccl_tests(text).rows.empty());
  }
  struct expect_t {
    const char* file;
    double peak;
    std::string devices;
    bool p2p_off;
  };
  const expect_t cases[] = {
      {"a40x8-nvlink-pair-gpu01-allreduce-perf.txt", 47.49, "0,1", false},
      {"a40x8-gpus12-node-p2pdisabled-allreduce-perf.txt", 4.02, "1,2", true},
      {"a40x8-gpus0167-sys-p2pdisabled-allreduce-perf.txt", 1.44, "0,1,6,7", true},
      {"dgx-a100-640gb-4gpu-allreduce-perf.txt", 234.74, "", false},
      {"dgx-a100-640gb-4gpu-p2pdisabled-allreduce-perf.txt", 5.20, "", true},
      {"dgx-h100-640gb-4gpu-allreduce-perf.txt", 370.75, "", false},
      {"dgx-h100-640gb-4gpu-p2pdisabled-allreduce-perf.txt", 24.27, "", false},
      {"aws-p4de-24xlarge-2node-allreduce-perf.txt", 78.33, "", false},
      {"aws-p5-48xlarge-2node-allreduce-perf.txt", 487.26, "", false},
  };
  for (const expect_t& c : cases) {
    INFO(c.file);
    const nccl_tests_table t = read_nccl_tests(topo_fixture(c.file), c.file);
    CHECK(t.peak_busbw() == Approx(c.peak));
    CHECK(t.visible_devices == c.devices);
    CHECK(t.p2p_disabled == c.p2p_off);  // the H100 P2P-disabled paste has no command line
    CHECK(t.binary == (t.command.empty() ? "" : "all_reduce_perf"));  // what collx-topo check compares
  }
  CHECK(read_nccl_tests("./build/broadcast_perf -g 2\n"
                        "  1073741824  268435456  float  none  0  11330  94.77  94.77  0  11329  94.78  94.78  0\n",
                        "b.txt")
            .binary == "broadcast_perf");
  const nccl_tests_table p5 = read_nccl_tests(topo_fixture("aws-p5-48xlarge-2node-allreduce-perf.txt"));
  CHECK(p5.rows.size() == 32);
  {  // lone-CR line ends (classic Mac): the same rows, not one long line
    std::string cr = topo_fixture("aws-p5-48xlarge-2node-allreduce-perf.txt");
    cr = std::regex_replace(cr, std::regex("\r?\n"), "\r");
    const nccl_tests_table t = read_nccl_tests(cr, "cr.txt");
    CHECK(t.rows.size() == 32);
    CHECK(t.peak_busbw() == Approx(p5.peak_busbw()));
    expect_error([] { read_nccl_tests("# size\r  1024  256  float  sum  -1  10.0  0.10\r", "p.txt"); }, "p.txt:2:", "columns");
    // A run of CRs is one line each (the run is scanned once: it was once per line, 6 s for 200 KB).
    expect_error([] { read_nccl_tests("# size" + std::string(1000, '\r') + "hello\r\r\n", "p.txt"); }, "p.txt:1001:1:");
  }
  CHECK(p5.rows.back().bytes == 17179869184ull);
  expect_error([] { read_nccl_tests("# size\n  1024  256  float  sum  -1  10.0  0.10\n", "p.txt"); }, "p.txt:2:", "columns");
  expect_error([] { read_nccl_tests("  1024  256  float  sum  -1  1x0  0.1  0.1  0  10  0.1  0.1  0\n", "p.txt"); }, "p.txt:1:30:", "not a number");
  expect_error([] { read_nccl_tests("hello world\n", "p.txt"); }, "p.txt:1:1:");
  expect_error([] { read_nccl_tests(std::string("  1024  256  float  sum  -1  10\0x  0.1  0.1  0  10  0.1  0.1  0\n", 64), "p.txt"); },
               "p.txt:1:30:", "not a number");  // a NUL byte inside a value
  // Sizes, times and rates that are not finite or are negative: errors, not a cast or an inf ratio.
  expect_error([] { read_nccl_tests("  1024  256  float  sum  -1  10  0.1  nan  0  10  0.1  0.1  0\n", "p.txt"); }, "p.txt:1:", "finite");
  expect_error([] { read_nccl_tests("  1024  256  float  sum  -1  -10  0.1  0.1  0  10  0.1  0.1  0\n", "p.txt"); }, "p.txt:1:", "finite");
  expect_error([] { read_nccl_tests("  1024  256  float  sum  -1  10  inf  0.1  0  10  0.1  0.1  0\n", "p.txt"); }, "p.txt:1:", "finite");
  {  // The average line is checked like the rows, -g read only as a count (strtod and atoi made 1e999999 inf, -1 a count).
    const std::string row = "  1024  256  float  sum  -1  10  0.1  0.1  0  10  0.1  0.1  0\n";
    CHECK(read_nccl_tests(row + "# Avg bus bandwidth    : 222.066\n", "p.txt").avg_busbw == Approx(222.066));
    // nccl-tests prints "%g %s": OK or FAILED follows under NCCL_TESTS_MIN_BW.
    CHECK(read_nccl_tests(row + "# Avg bus bandwidth    : 0.0012 OK\n", "p.txt").avg_busbw == Approx(0.0012));
    CHECK(read_nccl_tests(row + "# Avg bus bandwidth    : 3.5 FAILED\n", "p.txt").avg_busbw == Approx(3.5));
    CHECK(read_nccl_tests("./all_reduce_perf -b 8 -g 8\n" + row, "p.txt").gpus_flag == 8);
    expect_error([&] { read_nccl_tests(row + "# Avg bus bandwidth    : 1e999999\n", "p.txt"); }, "p.txt:2:26:", "'1e999999' is not a size, time or rate");
    expect_error([&] { read_nccl_tests(row + "# Avg bus bandwidth : 2x\n", "p.txt"); }, "p.txt:2:23:", "'2x' is not a number");
    for (const char* g : {"0", "-1", "1025", "99999999999999999999", "4x", "+2", "$NGPUS"}) {  // not a count: as if absent
      INFO(g);
      CHECK(read_nccl_tests(std::string("./all_reduce_perf -g ") + g + "\n" + row, "p.txt").gpus_flag == 0);
    }
  }
  {  // #wrong: a count, or N/A under -c 0; results with wrong sums measured no all-reduce and are no peak.
    const nccl_tests_table t = read_nccl_tests(
        "  1024  256  float  sum  -1  10  0.1  0.1  N/A  10  0.1  0.1  N/A\n"
        "  2048  512  float  sum  -1  10  0.2  0.3  0  10  0.2  0.4  0\n"
        "  4096  1024  float  sum  -1  10  0.4  9.5  12  10  0.4  0.5  0\n"
        "  8192  2048  float  sum  -1  10  0.8  8.5  0  10  0.8  9.9  2048\n",
        "p.txt");
    CHECK(t.rows[0].wrong[0] == -1);
    CHECK(t.rows[0].wrong[1] == -1);
    CHECK(t.rows[2].wrong[0] == 12);
    CHECK(t.rows[3].wrong[1] == 2048);
    CHECK(t.wrong_results() == 2);
    CHECK(t.peak_busbw() == Approx(8.5));  // not 9.5 or 9.9, whose sums were wrong
    expect_error([] { read_nccl_tests("  1024  256  float  sum  -1  10  0.1  0.1  x  10  0.1  0.1  0\n", "p.txt"); }, "p.txt:1:", "'x' is not a number");
  }
}
