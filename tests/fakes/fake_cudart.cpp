// A fake CUDA runtime (a shared library loaded by collx's discovery in place of libcudart.so) that
// serves the canned machines of fake_gpu_machines.hpp. It exports the entry points discovery calls,
// with the C ABI of CUDA 13.0's cuda_runtime_api.h and driver_types.h. Where that header is on the
// include path (COLLX_CUDA_INCLUDE_DIR) it is included, so the compiler checks these definitions
// against NVIDIA's declarations; elsewhere the few types are declared here as the header has them.
#include "fake_gpu_machines.hpp"

#include <cctype>
#include <cstdio>

#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#else
extern "C" {
typedef enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInsufficientDriver = 35, cudaErrorNoDevice = 100,
                         cudaErrorInvalidDevice = 101, cudaErrorUnknown = 999 } cudaError_t;
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
enum cudaDeviceP2PAttr { cudaDevP2PAttrPerformanceRank = 1, cudaDevP2PAttrAccessSupported = 2, cudaDevP2PAttrNativeAtomicSupported = 3 };
}
#endif

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// The machine, or the error cudaGetDeviceCount gives without one.
const fake_gpu::machine* machine_or(cudaError_t& e) {
  const fake_gpu::machine* m = fake_gpu::current();
  e = m ? cudaSuccess : fake_gpu::no_device() ? cudaErrorNoDevice : cudaErrorInsufficientDriver;
  return m;
}

// Index in machine::gpus of CUDA device d, or -1.
int gpu_of(const fake_gpu::machine& m, int d) { return d >= 0 && d < m.ngpus ? m.cuda_order[d] : -1; }

}  // namespace

FAKE_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  cudaError_t e;
  const fake_gpu::machine* m = machine_or(e);
  if (!m) return e;  // like the real runtime, *count is left alone
  if (fake_gpu::fail("cudaGetDeviceCount")) return cudaErrorUnknown;
  if (!count) return cudaErrorInvalidValue;
  *count = m->ngpus;
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  cudaError_t e;
  const fake_gpu::machine* m = machine_or(e);
  if (!m) return e;
  const int g = gpu_of(*m, device);
  if (g < 0) return cudaErrorInvalidDevice;
  if (fake_gpu::fail("cudaDeviceGetPCIBusId", g)) return cudaErrorUnknown;
  if (!pciBusId || len < 13) return cudaErrorInvalidValue;
  std::snprintf(pciBusId, static_cast<std::size_t>(len), "%s", m->gpus[g].busid);
  for (char* c = pciBusId; *c; ++c) *c = static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));  // "0000:3B:00.0"
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  cudaError_t e;
  const fake_gpu::machine* m = machine_or(e);
  if (!m) return e;
  const int g = gpu_of(*m, device);
  if (g < 0) return cudaErrorInvalidDevice;
  if (fake_gpu::fail("cudaDeviceGetAttribute", g)) return cudaErrorUnknown;
  if (!value) return cudaErrorInvalidValue;
  if (attr == cudaDevAttrComputeCapabilityMajor) *value = m->gpus[g].sm / 10;
  else if (attr == cudaDevAttrComputeCapabilityMinor) *value = m->gpus[g].sm % 10;
  else return cudaErrorInvalidValue;  // not served by this fake
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  cudaError_t e;
  const fake_gpu::machine* m = machine_or(e);
  if (!m) return e;
  const int a = gpu_of(*m, device), b = gpu_of(*m, peerDevice);
  if (a < 0 || b < 0) return cudaErrorInvalidDevice;
  if (fake_gpu::fail("cudaDeviceCanAccessPeer", a)) return cudaErrorUnknown;
  if (!canAccessPeer) return cudaErrorInvalidValue;
  *canAccessPeer = a != b && fake_gpu::peer_access(*m, a, b) ? 1 : 0;
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaDeviceGetP2PAttribute(int* value, enum cudaDeviceP2PAttr attr, int srcDevice, int dstDevice) {
  cudaError_t e;
  const fake_gpu::machine* m = machine_or(e);
  if (!m) return e;
  const int a = gpu_of(*m, srcDevice), b = gpu_of(*m, dstDevice);
  if (a < 0 || b < 0 || a == b) return cudaErrorInvalidDevice;
  if (fake_gpu::fail("cudaDeviceGetP2PAttribute", a)) return cudaErrorUnknown;
  if (!value) return cudaErrorInvalidValue;
  const bool p2p = fake_gpu::peer_access(*m, a, b);
  if (attr == cudaDevP2PAttrPerformanceRank) *value = fake_gpu::links_between(*m, a, b) > 0 || std::strcmp(m->name, "hgx-h100") == 0 ? 0 : 1;
  else if (attr == cudaDevP2PAttrAccessSupported) *value = p2p ? 1 : 0;
  else if (attr == cudaDevP2PAttrNativeAtomicSupported) *value = p2p ? 1 : 0;
  else return cudaErrorInvalidValue;
  return cudaSuccess;
}

FAKE_EXPORT const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "unknown error";
  }
}

// ---------------------------------------------------------------------------------------------
// What a device communicator's construction calls (collx/cuda/device_communicator.hpp, host C++):
// tests/test_device_bootstrap.cpp links this library in place of libcudart. "Device memory" is
// host memory, the current device is per thread, an IPC handle carries the address (ranks are
// threads of one process), and fake_cudart_live() counts the allocations and registrations still
// held, so a test sees what a communicator leaves behind. Kernels are out of reach: nothing here
// launches one. Only where NVIDIA's header gives the types (cudaDeviceProp, cudaIpcMemHandle_t).
#if __has_include(<cuda_runtime_api.h>)
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace {
thread_local int current_device = 0;
std::atomic<int> live{0};
std::mutex allocations_mutex;
std::map<std::uintptr_t, std::size_t> allocations;  // cudaMalloc's, by address: for cuMemGetAddressRange_v2

cudaError_t device_ok(int device) {
  cudaError_t e;
  const fake_gpu::machine* m = machine_or(e);
  if (!m) return e;
  return gpu_of(*m, device) < 0 ? cudaErrorInvalidDevice : cudaSuccess;
}
// The GPU index (machine::gpus) of the calling thread's device, for COLLX_FAKE_GPU_FAIL's @GPU.
int current_gpu() {
  const fake_gpu::machine* m = fake_gpu::current();
  return m ? gpu_of(*m, current_device) : -1;
}
}  // namespace

FAKE_EXPORT int fake_cudart_live() { return live.load(); }

FAKE_EXPORT cudaError_t cudaGetDevice(int* device) {
  const cudaError_t e = device_ok(current_device);
  if (e == cudaSuccess) *device = current_device;
  return e;
}

FAKE_EXPORT cudaError_t cudaSetDevice(int device) {
  const cudaError_t e = device_ok(device);
  if (e == cudaSuccess) current_device = device;
  return e;
}

FAKE_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  const cudaError_t e = device_ok(device);
  if (e != cudaSuccess) return e;
  const fake_gpu::machine& m = *fake_gpu::current();
  const int g = gpu_of(m, device);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "fake %s GPU %d", m.name, g);
  prop->major = m.gpus[g].sm / 10;
  prop->minor = m.gpus[g].sm % 10;
  prop->multiProcessorCount = 132;
  for (std::size_t i = 0; i < sizeof prop->uuid.bytes; ++i) prop->uuid.bytes[i] = static_cast<char>(m.gpus[g].busid[i % 12] + g);
  return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int) {
  const fake_gpu::machine* m = fake_gpu::current();
  if (!m || gpu_of(*m, peerDevice) < 0) return cudaErrorInvalidDevice;
  return fake_gpu::peer_access(*m, gpu_of(*m, current_device), gpu_of(*m, peerDevice)) ? cudaSuccess : cudaErrorPeerAccessUnsupported;
}

FAKE_EXPORT cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  if (fake_gpu::fail("cudaMalloc", current_gpu())) return cudaErrorMemoryAllocation;
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*p) return cudaErrorMemoryAllocation;
  ++live;
  std::lock_guard<std::mutex> lock(allocations_mutex);
  allocations[reinterpret_cast<std::uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaFree(void* p) {
  if (p) --live;
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    allocations.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}
// The driver API's entry point (libcuda's; collx looks it up by name): the cudaMalloc allocation
// holding `dptr`, or CUDA_ERROR_NOT_FOUND (500).
FAKE_EXPORT int cuMemGetAddressRange_v2(unsigned long long* base, std::size_t* bytes, unsigned long long dptr) {
  if (fake_gpu::fail("cuMemGetAddressRange", current_gpu())) return 500;
  std::lock_guard<std::mutex> lock(allocations_mutex);
  auto it = allocations.upper_bound(static_cast<std::uintptr_t>(dptr));
  if (it == allocations.begin()) return 500;
  --it;
  if (dptr >= it->first + it->second) return 500;
  *base = it->first;
  *bytes = it->second;
  return 0;
}
FAKE_EXPORT cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned int) {
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*p) return cudaErrorMemoryAllocation;
  ++live;
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
FAKE_EXPORT cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int) {
  *device = host;  // unified addressing: the host address is the device address
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaHostRegister(void*, std::size_t, unsigned int) {
  if (fake_gpu::fail("cudaHostRegister", current_gpu())) return cudaErrorHostMemoryAlreadyRegistered;
  ++live;
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaHostUnregister(void*) {
  --live;
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaMemset(void* p, int value, std::size_t bytes) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  static int token;  // any non-null handle: nothing runs on it
  *s = reinterpret_cast<cudaStream_t>(&token);
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
// The communicator's cross-stream order events: made with it, counted as live until destroyed.
FAKE_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = reinterpret_cast<cudaEvent_t>(new char);
  ++live;
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<char*>(e);
  --live;
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
FAKE_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
FAKE_EXPORT cudaError_t cudaGetLastError() { return cudaSuccess; }
FAKE_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p) {
  if (fake_gpu::fail("cudaIpcGetMemHandle", current_gpu())) return cudaErrorInvalidValue;
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &p, sizeof p);
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle, unsigned int) {
  if (fake_gpu::fail("cudaIpcOpenMemHandle", current_gpu())) return cudaErrorInvalidResourceHandle;
  std::memcpy(p, handle.reserved, sizeof *p);
  return cudaSuccess;
}
FAKE_EXPORT cudaError_t cudaIpcCloseMemHandle(void*) { return cudaSuccess; }
FAKE_EXPORT const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorPeerAccessUnsupported: return "cudaErrorPeerAccessUnsupported";
    default: return "cudaErrorUnknown";
  }
}
#endif
