/// @file detail/numa.hpp
/// NUMA placement of shared-memory pages (Linux; no libnuma needed): which node a rank's CPUs are
/// on, and moving a range of a tmpfs-backed mapping to a node. The shm transport puts each rank's
/// outgoing staging slots on that rank's node: the writes stay local and only the peers' reads
/// cross the socket link (topo/placement.hpp says why).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <collx/detail/cpus.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// Calls f(N) for every "nodeN" entry of directory `dir` (sysfs' node links and directories).
template <class F>
void for_each_node_entry(const std::string& dir, F&& f) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    const char* name = e->d_name;
    if (std::strncmp(name, "node", 4) != 0 || !name[4]) continue;
    const char* p = name + 4;
    while (*p >= '0' && *p <= '9') ++p;
    if (!*p) f(std::atoi(name + 4));
  }
  ::closedir(d);
}

/// NUMA nodes sysfs lists (/sys/devices/system/node/nodeN); 1 when it lists none.
inline int numa_node_count(const std::string& sysfs = "/sys") {
  int n = 0;
  for_each_node_entry(sysfs + "/devices/system/node", [&](int) { ++n; });
  return n > 0 ? n : 1;
}

/// The node of CPU `cpu` (the nodeN entry in /sys/devices/system/cpu/cpuCPU/), -1 if unknown.
inline int numa_node_of_cpu(int cpu, const std::string& sysfs = "/sys") {
  int node = -1;
  for_each_node_entry(sysfs + "/devices/system/cpu/cpu" + std::to_string(cpu), [&](int n) { node = n; });
  return node;
}

/// The one node all of `cpus` belong to; -1 if they span several or a node is unknown (an unpinned
/// process on a multi-node machine: nowhere is local to it).
inline int numa_node_of(const cpu_bits& cpus, const std::string& sysfs = "/sys") {
  int node = -1;
  for (int cpu = 0; cpu < cpu_bits::max_cpus; ++cpu) {
    if (!cpus.has(cpu)) continue;
    const int n = numa_node_of_cpu(cpu, sysfs);
    if (n < 0 || (node >= 0 && n != node)) return -1;
    node = n;
  }
  return node;
}

/// Puts the pages of [offset, offset + len) of the tmpfs file `fd`, mapped at `addr` (page
/// aligned, as are offset and len), on node `node`: sets the file's policy for the range to prefer
/// the node (mbind on a shared mapping sets the policy of the file, which later allocations of
/// those pages follow), frees the pages (punch a hole), allocates them again, and maps them into
/// this process (MADV_POPULATE_WRITE where the kernel has it). Pages other processes map are
/// remapped on their next touch. Returns 0, or the errno of the step that failed, which `step`
/// names (ENOSPC: /dev/shm is full); EPERM or ENOSYS from mbind (a seccomp profile without
/// CAP_SYS_NICE, as Docker's default, or a kernel without NUMA) changes nothing. Nothing else may
/// use the range meanwhile.
inline int place_pages_on_node(int fd, std::byte* addr, std::size_t offset, std::size_t len, int node, const char*& step) {
  if (len == 0) return 0;
  unsigned long mask[16] = {};  // nodes 0-1023
  step = "mbind";
  if (node < 0 || node >= 1024) return EINVAL;
  mask[node / 64] = 1ul << (node % 64);
  // maxnode is one more than the mask's bits: the kernel drops the last one (mbind(2), NOTES).
  if (::syscall(SYS_mbind, addr, len, MPOL_PREFERRED, mask, 16 * 64 + 1, 0) != 0) return errno;
  step = "punching a hole";
  if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), static_cast<off_t>(len)) != 0)
    return errno;
  step = "allocating the pages again";
  if (const int e = ::posix_fallocate(fd, static_cast<off_t>(offset), static_cast<off_t>(len)); e != 0) return e;
#if defined(MADV_POPULATE_WRITE)
  ::madvise(addr, len, MADV_POPULATE_WRITE);  // an optimisation: old kernels fault the pages in later
#endif
  return 0;
}

/// Where the page at `addr` lies and the policy that placed it (get_mempolicy(2) with MPOL_F_ADDR):
/// node -1 / policy -1 when the kernel does not say (no NUMA support).
struct page_placement {
  int node = -1;
  int policy = -1;  ///< MPOL_DEFAULT, MPOL_PREFERRED, ...
};
inline page_placement placement_of(const void* addr) {
  page_placement p;
  int v = -1;
  if (::syscall(SYS_get_mempolicy, &v, nullptr, 0, addr, MPOL_F_NODE | MPOL_F_ADDR) == 0) p.node = v;
  if (::syscall(SYS_get_mempolicy, &v, nullptr, 0, addr, MPOL_F_ADDR) == 0) p.policy = v;
  return p;
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
