// A fake sysfs/procfs tree for discovery tests (collx/topo/discover.hpp reads its roots from
// discover_options): two NUMA nodes (CPUs 0-3 and 4-7, sockets 0 and 1), a Sapphire Rapids in
// /proc/cpuinfo, and, for a canned machine of fake_gpu_machines.hpp, each of its GPUs on PCI under
// a PCIe switch of its socket (see below), at the machine's bus ids. With the fake NVML serving the
// same machine, discovery then finds its NVLinks too. Removed when it goes out of scope.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fake_gpu_machines.hpp"

namespace fake_gpu {

struct sysfs_tree {
  std::filesystem::path root;

  /// A tree under the temporary directory, named after this process and `tag`; GPUs of `m` if given.
  explicit sysfs_tree(const std::string& tag, const machine* m = nullptr) {
    namespace fs = std::filesystem;
    root = fs::temp_directory_path() / ("collx-fake-sysfs-" + std::to_string(::getpid()) + "-" + tag);
    fs::remove_all(root);
    write(root / "sys/devices/system/node/node0/cpulist", "0-3");
    write(root / "sys/devices/system/node/node1/cpulist", "4-7");
    for (int c = 0; c < 8; ++c)
      write(root / "sys/devices/system/cpu" / ("cpu" + std::to_string(c)) / "topology/physical_package_id", c < 4 ? "0" : "1");
    write(root / "proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n");
    fs::create_directories(root / "sys/bus/pci/devices");
    if (!m) return;
    // GPUs in pairs (0 and 1, 2 and 3, ...) behind a PCIe switch under a root port of their
    // socket, as on a DGX-1; the PCIe generation of the GPU's era (V100: Gen3, H100: Gen5).
    const char* speed = m->gpus[0].sm >= 90 ? "32.0 GT/s PCIe" : m->gpus[0].sm >= 80 ? "16.0 GT/s PCIe" : "8.0 GT/s PCIe";
    for (int g = 0; g < m->ngpus; ++g) {
      const gpu& x = m->gpus[g];
      const std::string domain = x.socket == 0 ? "0000:00" : "0000:80";
      char port[32], up[32], down[32], id[16];
      std::snprintf(port, sizeof port, "%s:%02x.0", domain.c_str(), g / 2 + 1);
      std::snprintf(up, sizeof up, "0000:%02x:00.0", 0x20 + g / 2);
      std::snprintf(down, sizeof down, "0000:%02x:%02x.0", 0x30 + g / 2, g % 2);
      std::snprintf(id, sizeof id, "0x%04x", x.pci_device);
      const fs::path sw = root / "sys/devices" / ("pci" + domain) / port / up;
      write(sw / "current_link_speed", speed);
      write(sw / "current_link_width", "16");
      const fs::path d = sw / down / x.busid;
      write(d / "class", "0x030200");
      write(d / "vendor", "0x10de");
      write(d / "device", id);
      write(d / "numa_node", std::to_string(x.socket));
      write(d / "current_link_speed", speed);
      write(d / "current_link_width", "16");
      fs::create_directory_symlink(d, root / "sys/bus/pci/devices" / x.busid);
    }
  }
  ~sysfs_tree() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  sysfs_tree(const sysfs_tree&) = delete;
  sysfs_tree& operator=(const sysfs_tree&) = delete;

  std::string sys() const { return (root / "sys").string(); }
  std::string proc() const { return (root / "proc").string(); }

  static void write(const std::filesystem::path& p, const std::string& s) {
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << s << "\n";
  }
};

}  // namespace fake_gpu
