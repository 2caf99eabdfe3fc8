/// @file cuda/shared_host_memory.hpp
/// Pinned host memory shared by the processes of one node and mapped into the GPUs' address
/// space: a POSIX shared-memory object, mapped by each rank and registered with
/// cudaHostRegister(portable | mapped), so kernels on any GPU read and write it over PCIe. This is
/// where a device communicator keeps its workspaces when its GPUs have no peer access
/// (workspace_memory::host), as NCCL's SHM transport stages through host memory.
/// Host C++ with the CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include <collx/cuda/runtime.hpp>
#include <collx/detail/process.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// One rank's mapping of a shared-memory object, pinned and visible to the GPUs. Move-only; the
/// destructor unregisters and unmaps it (and removes the name if this mapping created it and has
/// not removed it yet, so a failed start-up leaves nothing in /dev/shm).
class shared_host_memory {
 public:
  /// No mapping (host() and device() null).
  shared_host_memory() = default;

  /// Creates a new object of `bytes` (> 0) bytes under a fresh name ("/collx-gpu-<pid>-<random>"; the
  /// name() to give the other ranks), zero-filled and backed at once (posix_fallocate, so a full
  /// /dev/shm fails here, not as SIGBUS later), then maps and registers it. First removes what
  /// creators that no longer run left behind at least 10 minutes ago (remove_orphans: killed
  /// during a communicator's setup, before the name was removed).
  /// @throws collx::error (errc::system) when the object cannot be created, sized or mapped, e.g.
  ///         /dev/shm too small or bytes 0; (errc::cuda) when cudaHostRegister or
  ///         cudaHostGetDevicePointer fails.
  static shared_host_memory create(std::size_t bytes) {
    remove_orphans();
    shared_host_memory m;
    std::random_device rd;
    char name[64];
    std::snprintf(name, sizeof name, "/collx-gpu-%ld-%08x%08x", static_cast<long>(::getpid()), rd(), rd());
    m.name_ = name;
    const int fd = ::shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) fail("shm_open(" + m.name_ + ")");
    (void)::fchmod(fd, 0600);  // whatever the umask: the other ranks open it
    m.owns_name_ = true;
    const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (e != 0) {
      ::close(fd);
      errno = e;
      fail("posix_fallocate(" + m.name_ + ", " + std::to_string(bytes) + " bytes): is /dev/shm large enough?");
    }
    m.map(fd, bytes);
    return m;
  }

  /// Maps and registers the object `name` of `bytes` bytes that another rank created.
  /// @throws collx::error (errc::system) when it cannot be opened or is smaller than `bytes`;
  ///         (errc::cuda) when cudaHostRegister or cudaHostGetDevicePointer fails.
  static shared_host_memory open(const std::string& name, std::size_t bytes) {
    shared_host_memory m;
    m.name_ = name;
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) fail("shm_open(" + name + ") (rank 0 created it: are all ranks on one node?)");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < bytes) {
      ::close(fd);
      COLLX_THROW(errc::system, "gpu: shared host memory " + name + " holds " + std::to_string(st.st_size) +
                                    " bytes, " + std::to_string(bytes) + " expected");
    }
    m.map(fd, bytes);
    return m;
  }

  /// Takes o's mapping (o is left empty).
  shared_host_memory(shared_host_memory&& o) noexcept { *this = std::move(o); }
  /// Releases this mapping, then takes o's (o is left empty).
  shared_host_memory& operator=(shared_host_memory&& o) noexcept {
    if (this != &o) {
      reset();
      host_ = std::exchange(o.host_, nullptr);
      device_ = std::exchange(o.device_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      registered_ = std::exchange(o.registered_, false);
      owns_name_ = std::exchange(o.owns_name_, false);
      name_ = std::move(o.name_);
    }
    return *this;
  }
  /// Not copyable: it owns the mapping.
  shared_host_memory(const shared_host_memory&) = delete;
  /// Not copyable: it owns the mapping.
  shared_host_memory& operator=(const shared_host_memory&) = delete;
  /// Unregisters (cudaHostUnregister) and unmaps the memory, and removes the name if this mapping
  /// still owns it (unlink_name); errors are ignored.
  ~shared_host_memory() { reset(); }

  /// Removes the name: the memory stays until every mapping is gone. Call it once every rank has
  /// opened the object, so that a crash later leaves nothing behind.
  void unlink_name() noexcept {
    if (owns_name_) (void)::shm_unlink(name_.c_str());
    owns_name_ = false;
  }

  /// The object's name (for open() on the other ranks).
  const std::string& name() const noexcept { return name_; }
  /// The mapping as this process's host code sees it.
  std::byte* host() const noexcept { return host_; }
  /// The mapping as kernels see it (cudaHostGetDevicePointer).
  std::byte* device() const noexcept { return device_; }
  /// Bytes mapped.
  std::size_t bytes() const noexcept { return bytes_; }

  /// Removes every /dev/shm/collx-gpu-<pid>-* of this user, last changed at least `min_age` ago,
  /// whose creator <pid> no longer runs here. The age guards a live creator that this process
  /// cannot see (another PID namespace sharing /dev/shm), whose setup takes seconds. Returns how
  /// many were removed.
  static int remove_orphans(std::chrono::seconds min_age = std::chrono::minutes(10)) noexcept {
    int removed = 0;
    DIR* d = ::opendir("/dev/shm");
    if (!d) return 0;
    const auto now = std::chrono::system_clock::now();
    while (const dirent* e = ::readdir(d)) {
      long pid = 0;
      char rest = 0;
      if (std::sscanf(e->d_name, "collx-gpu-%ld-%c", &pid, &rest) != 2 || pid <= 0) continue;
      if (!detail::process_dead(static_cast<pid_t>(pid), 0)) continue;  // alive (a zombie counts as dead)
      const std::string path = "/dev/shm/" + std::string(e->d_name);
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0 || st.st_uid != ::getuid()) continue;
      if (now - std::chrono::system_clock::from_time_t(st.st_mtime) < min_age) continue;
      removed += ::shm_unlink(("/" + std::string(e->d_name)).c_str()) == 0;
    }
    ::closedir(d);
    return removed;
  }

 private:
  [[noreturn]] static void fail(const std::string& what) {
    COLLX_THROW(errc::system, "gpu: " + what + " failed: " + std::strerror(errno));
  }

  void map(int fd, std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) fail("mmap(" + name_ + ")");
    host_ = static_cast<std::byte*>(p);
    bytes_ = bytes;
    check(cudaHostRegister(host_, bytes_, cudaHostRegisterPortable | cudaHostRegisterMapped),
          "cudaHostRegister(shared host workspace)");
    registered_ = true;
    void* d = nullptr;
    check(cudaHostGetDevicePointer(&d, host_, 0), "cudaHostGetDevicePointer(shared host workspace)");
    device_ = static_cast<std::byte*>(d);
  }

  void reset() noexcept {
    if (registered_) (void)cudaHostUnregister(host_);
    if (host_) ::munmap(host_, bytes_);
    unlink_name();
    host_ = device_ = nullptr;
    bytes_ = 0;
    registered_ = false;
  }

  std::byte* host_ = nullptr;
  std::byte* device_ = nullptr;
  std::size_t bytes_ = 0;
  bool registered_ = false;
  bool owns_name_ = false;
  std::string name_;
};

}  // namespace gpu
}  // namespace v0
}  // namespace collx
