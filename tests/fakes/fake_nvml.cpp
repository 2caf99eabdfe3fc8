// A fake NVML (a shared library loaded by collx's discovery in place of libnvidia-ml.so.1) that
// serves the canned machines of fake_gpu_machines.hpp. It exports the entry points discovery calls
// with the C ABI of nvml.h (NVML_API_VERSION 13: PyPI nvidia-nvml-dev 13.0.87, include/nvml.h).
// Where nvml.h is on the include path (COLLX_NVML_INCLUDE_DIR) it is included, so the compiler
// checks these definitions and nvmlPciInfo_t against NVIDIA's declarations; elsewhere the types are
// declared here as nvml.h has them.
//
// Built twice: fake_nvml, and fake_nvml_notype with FAKE_NVML_NO_REMOTE_TYPE, which lacks
// nvmlDeviceGetNvLinkRemoteDeviceType (NVML before 11.5), so discovery must tell NVSwitch links by
// their remote bus id. fake_nvml_open_sessions() (not NVML's) tells the test how many
// nvmlInit_v2 calls have no nvmlShutdown yet.
#include "fake_gpu_machines.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>

#if __has_include(<nvml.h>)
#include <nvml.h>
#else
extern "C" {
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef enum nvmlEnableState_enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;
typedef enum nvmlIntNvLinkDeviceType_enum {
  NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
  NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
  NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
  NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_NVLINK_MAX_LINKS 18
typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;
}
#endif

// The layout collx's discovery assumes (include/collx/topo/discover.hpp, nvml_pci_info).
static_assert(sizeof(nvmlPciInfo_t) == 16 + 5 * 4 + 32, "nvmlPciInfo_t layout");
static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t layout");
static_assert(NVML_NVLINK_MAX_LINKS == 18, "NVML_NVLINK_MAX_LINKS");

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

int sessions = 0;                        // nvmlInit_v2 calls not yet shut down
const fake_gpu::machine* the = nullptr;  // chosen at nvmlInit_v2

// Index in machine::gpus of a handle, or -1.
int gpu_of(nvmlDevice_t d) {
  const auto i = static_cast<int>(reinterpret_cast<std::uintptr_t>(d)) - 1;
  return the && i >= 0 && i < the->ngpus ? i : -1;
}

void fill_pci(nvmlPciInfo_t* p, unsigned domain, unsigned bus, unsigned device, unsigned pci_device) {
  *p = nvmlPciInfo_t{};
  p->domain = domain, p->bus = bus, p->device = device;
  p->pciDeviceId = pci_device << 16 | 0x10de;
  std::snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.0", domain & 0xffffu, bus & 0xffu, device & 0x1fu);
  std::snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.0", domain, bus & 0xffu, device & 0x1fu);
}

}  // namespace

FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  if (fake_gpu::fail("nvmlInit_v2")) return NVML_ERROR_UNKNOWN;
  the = fake_gpu::current();
  if (!the) return NVML_ERROR_DRIVER_NOT_LOADED;
  ++sessions;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlShutdown(void) {
  if (sessions == 0) return NVML_ERROR_UNINITIALIZED;
  --sessions;
  return NVML_SUCCESS;
}

FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  if (sessions == 0) return NVML_ERROR_UNINITIALIZED;
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  if (!pciBusId || !device || std::sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return NVML_ERROR_INVALID_ARGUMENT;
  for (int g = 0; g < the->ngpus; ++g) {
    unsigned d2 = 0, b2 = 0, v2 = 0, f2 = 0;
    std::sscanf(the->gpus[g].busid, "%x:%x:%x.%x", &d2, &b2, &v2, &f2);
    if (d2 == dom && b2 == bus && v2 == dev && f2 == fn) {
      if (fake_gpu::fail("nvmlDeviceGetHandleByPciBusId_v2", g)) return NVML_ERROR_UNKNOWN;
      *device = reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(g + 1));
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t* isActive) {
  if (sessions == 0) return NVML_ERROR_UNINITIALIZED;
  const int g = gpu_of(device);
  if (g < 0 || !isActive || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
  if (the->nvlink_version == 0) return NVML_ERROR_NOT_SUPPORTED;  // a GPU without NVLink
  if (the->gpus[g].links[link] < 0) return NVML_ERROR_INVALID_ARGUMENT;  // V100: links 6..17 do not exist
  if (fake_gpu::fail("nvmlDeviceGetNvLinkState", g)) return NVML_ERROR_UNKNOWN;
  *isActive = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int* version) {
  if (sessions == 0) return NVML_ERROR_UNINITIALIZED;
  const int g = gpu_of(device);
  if (g < 0 || !version || link >= NVML_NVLINK_MAX_LINKS || the->gpus[g].links[link] < 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (fake_gpu::fail("nvmlDeviceGetNvLinkVersion", g)) return NVML_ERROR_UNKNOWN;
  *version = the->nvlink_version;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci) {
  if (sessions == 0) return NVML_ERROR_UNINITIALIZED;
  const int g = gpu_of(device);
  if (g < 0 || !pci || link >= NVML_NVLINK_MAX_LINKS || the->gpus[g].links[link] < 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (fake_gpu::fail("nvmlDeviceGetNvLinkRemotePciInfo_v2", g)) return NVML_ERROR_UNKNOWN;
  const int far = the->gpus[g].links[link];
  if (far >= fake_gpu::switch_base) {
    fill_pci(pci, 0, 0xf0u + static_cast<unsigned>(far - fake_gpu::switch_base), 0, 0x22a3);  // NVSwitch k at 0000:f<k>:00.0
  } else {
    unsigned dom = 0, bus = 0, dev = 0;
    std::sscanf(the->gpus[far].busid, "%x:%x:%x", &dom, &bus, &dev);
    fill_pci(pci, dom, bus, dev, the->gpus[far].pci_device);
  }
  return NVML_SUCCESS;
}

#if !defined(FAKE_NVML_NO_REMOTE_TYPE)
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t* pNvLinkDeviceType) {
  if (sessions == 0) return NVML_ERROR_UNINITIALIZED;
  const int g = gpu_of(device);
  if (g < 0 || !pNvLinkDeviceType || link >= NVML_NVLINK_MAX_LINKS || the->gpus[g].links[link] < 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (fake_gpu::fail("nvmlDeviceGetNvLinkRemoteDeviceType", g)) return NVML_ERROR_UNKNOWN;
  *pNvLinkDeviceType = the->gpus[g].links[link] >= fake_gpu::switch_base ? NVML_NVLINK_DEVICE_TYPE_SWITCH : NVML_NVLINK_DEVICE_TYPE_GPU;
  return NVML_SUCCESS;
}
#endif

/// Not NVML's: nvmlInit_v2 calls that have had no nvmlShutdown yet.
FAKE_EXPORT int fake_nvml_open_sessions(void) { return sessions; }
