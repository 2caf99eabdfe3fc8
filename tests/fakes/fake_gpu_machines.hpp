// Canned GPU machines that the fake CUDA runtime (fake_cudart.cpp) and fake NVML (fake_nvml.cpp)
// serve to tests/test_topo_discover_gpu.cpp. Both read the environment at every call:
//
//   COLLX_FAKE_GPU_MACHINE=
//     hgx-h100   8 H100 SXM (compute capability 9.0, PCI 10de:2330); each GPU's 18 NVLinks go to the
//                4 NVSwitches (5 + 4 + 4 + 5, as on HGX H100); peer access between every pair.
//     dgx1-v100  8 V100 SXM2 (7.0, 10de:1db5), the DGX-1 hybrid cube mesh: 6 NVLinks per GPU, at the
//                bus ids of tests/data/topologies/dgx1-v100-como-nccl-topo.xml; peer access over
//                NVLink only (GPUs 0-3 on socket 0, 4-7 on socket 1).
//     pcie2      2 A10G (8.6, 10de:2237) on PCIe, no NVLink (NVML says NOT_SUPPORTED), no peer
//                access; CUDA lists them in reverse bus order (device 0 is 0000:65:00.0).
//     nodevice   cudaGetDeviceCount: cudaErrorNoDevice (100); nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED.
//     (unset or anything else: as nodevice, but cudaErrorInsufficientDriver (35), what the real
//     libcudart says on a machine without a driver)
//   COLLX_FAKE_GPU_FAIL=<entry point>[@<GPU>]: that entry point fails (cudaErrorUnknown 999 or
//     NVML_ERROR_UNKNOWN 999), for every GPU or only for the one with that index in the tables below.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

namespace fake_gpu {

/// Far ends of NVLinks in the tables: 0..7 a GPU, switch_base + k NVSwitch k, -1 no link.
constexpr int switch_base = 100;

struct gpu {
  const char* busid;      // lower case, as sysfs writes it
  int sm;                 // compute capability x10
  unsigned pci_device;    // PCI device id (vendor 0x10de)
  int socket;
  int links[18];          // far end of NVLink l
};

struct machine {
  const char* name;
  int ngpus;
  gpu gpus[8];
  unsigned nvlink_version;  // nvmlNvlinkVersion_t of every link
  int cuda_order[8];        // CUDA device number d is gpus[cuda_order[d]]
};

// DGX-1 (V100) hybrid cube mesh: GPUs 0-3 and 4-7 are two fully connected quads with the pairs
// 0-3, 1-2, 2-3 (and 4-7, 5-6, 6-7) doubled, and GPU i joined to i+4 with 2 links (i = 0, 1) or 1 (i = 2, 3).
constexpr machine machines[] = {
    {"hgx-h100", 8,
     {{"0000:18:00.0", 90, 0x2330, 0, {100, 100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102, 103, 103, 103, 103, 103}},
      {"0000:2a:00.0", 90, 0x2330, 0, {100, 100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102, 103, 103, 103, 103, 103}},
      {"0000:3a:00.0", 90, 0x2330, 0, {100, 100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102, 103, 103, 103, 103, 103}},
      {"0000:5d:00.0", 90, 0x2330, 0, {100, 100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102, 103, 103, 103, 103, 103}},
      {"0000:9a:00.0", 90, 0x2330, 1, {100, 100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102, 103, 103, 103, 103, 103}},
      {"0000:ab:00.0", 90, 0x2330, 1, {100, 100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102, 103, 103, 103, 103, 103}},
      {"0000:ba:00.0", 90, 0x2330, 1, {100, 100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102, 103, 103, 103, 103, 103}},
      {"0000:db:00.0", 90, 0x2330, 1, {100, 100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102, 103, 103, 103, 103, 103}}},
     6, {0, 1, 2, 3, 4, 5, 6, 7}},
    {"dgx1-v100", 8,
     {{"0000:06:00.0", 70, 0x1db5, 0, {1, 2, 3, 3, 4, 4, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}},
      {"0000:07:00.0", 70, 0x1db5, 0, {0, 2, 2, 3, 5, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}},
      {"0000:0a:00.0", 70, 0x1db5, 0, {0, 1, 1, 3, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}},
      {"0000:0b:00.0", 70, 0x1db5, 0, {0, 0, 1, 2, 2, 7, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}},
      {"0000:85:00.0", 70, 0x1db5, 1, {0, 0, 5, 6, 7, 7, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}},
      {"0000:86:00.0", 70, 0x1db5, 1, {1, 1, 4, 6, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}},
      {"0000:89:00.0", 70, 0x1db5, 1, {2, 4, 5, 5, 7, 7, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}},
      {"0000:8a:00.0", 70, 0x1db5, 1, {3, 4, 4, 5, 6, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}}},
     2, {0, 1, 2, 3, 4, 5, 6, 7}},
    {"pcie2", 2,
     {{"0000:17:00.0", 86, 0x2237, 0, {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}},
      {"0000:65:00.0", 86, 0x2237, 0, {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}}},
     0, {1, 0}},
};

/// The canned machine called `name`, or nullptr.
inline const machine* find(const char* name) {
  for (const machine& m : machines)
    if (std::strcmp(m.name, name) == 0) return &m;
  return nullptr;
}

/// The machine COLLX_FAKE_GPU_MACHINE names, or nullptr.
inline const machine* current() {
  const char* n = std::getenv("COLLX_FAKE_GPU_MACHINE");
  return n ? find(n) : nullptr;
}

/// Whether COLLX_FAKE_GPU_MACHINE is "nodevice" (else an unknown machine is "no driver").
inline bool no_device() {
  const char* n = std::getenv("COLLX_FAKE_GPU_MACHINE");
  return n && std::strcmp(n, "nodevice") == 0;
}

/// Whether COLLX_FAKE_GPU_FAIL asks entry point `fn` to fail for GPU `g` (index in machine::gpus;
/// -1 for calls about no GPU).
inline bool fail(const char* fn, int g = -1) {
  const char* f = std::getenv("COLLX_FAKE_GPU_FAIL");
  if (!f) return false;
  const std::string s(f);
  const std::size_t at = s.find('@');
  if (s.substr(0, at) != fn) return false;
  return at == std::string::npos || std::atoi(s.c_str() + at + 1) == g;
}

/// Number of NVLinks between GPUs a and b of m (by the tables).
inline int links_between(const machine& m, int a, int b) {
  int n = 0;
  for (int l : m.gpus[a].links) n += l == b;
  return n;
}

/// Whether peer access works from GPU a to GPU b of m.
inline bool peer_access(const machine& m, int a, int b) {
  if (std::strcmp(m.name, "hgx-h100") == 0) return true;
  if (std::strcmp(m.name, "dgx1-v100") == 0) return links_between(m, a, b) > 0;
  return false;
}

}  // namespace fake_gpu
